"""The durable decode-job queue: job rows and their items, drains, dispatch (in process or Celery), recovery."""
