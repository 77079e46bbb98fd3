"""Decode jobs behind a small interface: in-process now, Celery workers later (workers issue)."""

from verifier.jobs.base import DecodeJob, JobRunner
from verifier.jobs.inprocess import InProcessJobRunner

__all__ = ["DecodeJob", "InProcessJobRunner", "JobRunner"]
