"""Service settings (pydantic-settings, env prefix HERO_). Every variable is documented in docs/service.md."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from verifier.base.resources import hero_home, project_root

REPO_ROOT = project_root()


def check_issuer_url(url: str) -> str:
    """An OIDC issuer: an https:// URL without query or fragment (http only on loopback, for a local test IdP)."""
    from urllib.parse import urlsplit

    u = urlsplit(str(url).strip())
    loopback = u.hostname in ("localhost", "127.0.0.1", "::1")
    if not u.hostname or u.query or u.fragment or not (u.scheme == "https" or (u.scheme == "http" and loopback)):
        raise ValueError("an OIDC issuer is an https:// URL without query or fragment (http only on loopback)")
    return str(url).strip()


class OidcIssuer(BaseModel):
    """One OpenID Connect issuer and what its tokens mean here (an entry of HERO_OIDC_ISSUERS). Nothing is taken
    from the single-issuer settings: a group name means a HeRo role only at the issuer whose map names it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    issuer: str
    audience: list[str] = Field(min_length=1)  # accepted values of `audience_claim` (a string is one value)
    # the claim holding the audience: "aud" (ID tokens, most access tokens) or "client_id" (AWS Cognito's access
    # tokens carry no `aud`)
    audience_claim: Literal["aud", "client_id"] = "aud"
    role_claim: str = Field(default="role", min_length=1, max_length=256)  # top-level name or dotted path
    role_map: dict[str, str] = Field(default_factory=dict)  # {} : the claim names HeRo roles itself

    @field_validator("issuer", mode="after")
    @classmethod
    def _url(cls, v: str) -> str:
        return check_issuer_url(v)

    @field_validator("audience", mode="before")
    @classmethod
    def _one(cls, v: object) -> object:
        return [v] if isinstance(v, str) else v

    @field_validator("role_map", mode="after")
    @classmethod
    def _map(cls, v: dict[str, str]) -> dict[str, str]:
        if any(not k or not r or len(k) > 256 or len(r) > 64 for k, r in v.items()):
            raise ValueError("role_map maps non-empty IdP role names to non-empty HeRo role names")
        return v


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="HERO_", extra="ignore")

    home: Path = Field(default_factory=hero_home)
    database_url: str | None = None
    auto_migrate: bool | None = None  # default: True for SQLite (embedded), False otherwise
    # HERO_PROFILE; unset: the profile of the deployment's keys, or NEW_DEPLOYMENT_PROFILE for a new deployment
    # (verifier/keys/deployment.py)
    profile: str | None = None
    # HERO_PROFILES_DIR: the deployment's own profiles (`hero profile new`), searched before the shipped ones; read
    # from the environment by verifier.engine.profile.resolve_profile, declared here so it is validated and listed
    profiles_dir: Path | None = None

    # Keys at rest
    kek_provider: Literal["local", "openbao", "aws-kms", "pkcs11"] = "local"
    kek_dir: Path | None = None  # default $HERO_HOME/kek
    # openbao (VAULT_ADDR, VAULT_TOKEN, VAULT_CACERT as for Vault's CLI) and pkcs11: the key's name / label
    kek_key_name: str = Field(default="hero", pattern=r"^[a-z0-9][a-z0-9-]{0,39}$")
    kek_transit_mount: str = "transit"
    kek_key_id: str | None = None  # aws-kms: key id, ARN or alias (region, credentials: the SDK's environment)
    kek_key_label: str = Field(default="hero-kek", pattern=r"^[a-z0-9][a-z0-9-]{0,39}$")  # pkcs11
    kek_pkcs11_module: Path | None = None  # e.g. /usr/lib/softhsm/libsofthsm2.so
    kek_pkcs11_token: str | None = None  # token label
    kek_pkcs11_pin_file: Path | None = None  # the user PIN, in a file only the service reads
    kek_timeout_seconds: float = Field(default=5.0, gt=0, le=60)  # per KMS call: then 503, nothing changed

    # Auth
    jwks_file: Path | None = None
    jwks_url: str | None = None
    jwks_cache_seconds: int = Field(default=300, ge=10, le=86400)
    jwks_wait_seconds: float = Field(default=3.0, ge=0, le=30)  # longest a request waits for a JWKS fetch
    jwt_issuer: str = "hero-dev"
    jwt_audience: str = "hero-verifier"
    jwt_leeway_seconds: int = Field(default=30, ge=0, le=60)
    jwt_max_ttl_seconds: int = Field(default=86400, ge=60)
    # The claim naming the caller's role: a top-level name, else a dotted path into nested objects
    # (`realm_access.roles`); its value a string or a list of strings. HERO_ROLE_MAP (JSON object) maps the IdP's
    # values to HeRo roles (`{"hero-auditors": "auditor"}`): when set, only mapped values count (none: 403).
    jwt_role_claim: str = Field(default="role", min_length=1, max_length=256)
    role_map: dict[str, str] = Field(default_factory=dict)
    # OpenID Connect issuers (HERO_OIDC_ISSUER: one URL, several comma-separated, or a JSON list): each one's keys
    # come from its discovery document's `jwks_uri`, refreshed like HERO_JWKS_URL; a token is checked with the keys
    # of the issuer it names, and only these issuers and HERO_JWT_ISSUER are accepted (docs/operations.md).
    oidc_issuer: Annotated[list[str], NoDecode] = Field(default_factory=list)
    # Per-issuer identity (HERO_OIDC_ISSUERS: a JSON list of {"issuer", "audience", "audience_claim", "role_claim",
    # "role_map"}, or the path of a file holding one): each issuer's own audience, role claim and role map
    # (verifier/settings.OidcIssuer; docs/operations.md). Beside HERO_OIDC_ISSUER, whose issuers keep the single
    # HERO_JWT_AUDIENCE / HERO_JWT_ROLE_CLAIM / HERO_ROLE_MAP; an issuer may be named in only one of them.
    oidc_issuers: Annotated[list[OidcIssuer], NoDecode] = Field(default_factory=list)
    roles_file: Path = REPO_ROOT / "policies" / "roles.yaml"
    dev_mode: bool = False
    bundle_ttl_seconds: int = Field(default=86400, ge=60, le=30 * 86400)  # generation-key bundles (providers)

    # Transparency log (signed checkpoints over the audit events)
    log_origin: str = Field(default="hero-verifier.local/audit", pattern=r"^[^\s+]{1,200}$")
    log_key_file: Path | None = None  # Ed25519 checkpoint signing key; default $HERO_HOME/log/checkpoint.key
    checkpoint_interval_seconds: float = Field(default=300.0, ge=0)  # 0: checkpoints only on demand

    # Limits
    max_body_bytes: int = Field(default=1_000_000, ge=1024)
    unauth_max_body_bytes: int = Field(default=1024, ge=0)  # outside /v1 (which reads nothing unauthenticated)
    max_texts: int = Field(default=32, ge=1)
    max_text_chars: int = Field(default=20_000, ge=1)
    alpha: float = Field(default=1e-4, gt=0, lt=1)
    # Model-aware scoring (HERO_MODEL_AWARE=1): the profile's LM re-run over each text weights its evidence
    # (verifier/engine/model_aware.py); every result says `scoring`. Needs the model package; off: model-free.
    model_aware: bool = False
    # Which statistic model-aware scoring sums (spec 16.1, 16.4, 16.5): "union" (the best of equal, linear and
    # likelihood-ratio weights per candidate, times 3: engine/weighted_decode.DEFAULT_STATISTIC), "linear" or
    # "likelihood-ratio" (each weaker somewhere: docs/research/2026-11-spec-v3-notes.md)
    model_aware_statistic: Literal["linear", "likelihood-ratio", "union"] = "union"
    # The union also reads each text once per floor with every token its LM re-run gives less than the floor taken
    # for an edit (it and the positions its context seeded weigh 0; spec 16.6; engine/weighted_decode.
    # DEFAULT_EDIT_FLOORS). A JSON list, e.g. HERO_MODEL_AWARE_EDIT_FLOORS='[1e-4]'; [] reads every token only.
    model_aware_edit_floors: tuple[float, ...] = (1e-4, 1e-5)
    # How this deployment's providers sample (HERO_MODEL_AWARE_TOP_K / _TOP_P / _TEMPERATURE): model-aware scoring
    # reads the re-run under that warp, mixed with the raw model (engine/model_aware.DeploymentSampling). A
    # setting of the deployment, never of a request (a caller choosing it could shop for a p-value).
    model_aware_top_k: int | None = Field(default=None, ge=1)
    model_aware_top_p: float | None = Field(default=None, gt=0, le=1)
    model_aware_temperature: float = Field(default=1.0, gt=0)
    # Model-aware cost bounds (engine/model_aware.py, verifier/base/cancel.py): LM tokens per text (413 above it; never
    # more than the model's context) and per /v1/verify request, padded tokens per forward pass (the memory
    # bound: docs/performance.md), and a wall-clock deadline per decode (503 past it; /readyz reports a worker
    # still running past it). Roles' quotas may count LM tokens too (lm_tokens_per_minute / _per_day).
    model_aware_max_tokens: int = Field(default=2048, ge=16, le=131072)
    model_aware_max_request_tokens: int = Field(default=8192, ge=16)
    model_aware_batch_tokens: int = Field(default=4096, ge=256, le=1_048_576)
    model_aware_deadline_seconds: float = Field(default=120.0, gt=0, le=3600)
    # Model-aware decodes at once per process (verifier/base/workslots.py; unset: one per two cores, within the
    # available memory at 2 GiB each) and how long a request waits for one before 503 + Retry-After (nothing charged)
    model_aware_concurrency: int | None = Field(default=None, ge=1, le=256)
    model_aware_queue_seconds: float = Field(default=10.0, ge=0, le=600)
    # `expect`: distinct values one subject may ask about one text, per level (verify/expect.py; each answer is
    # corrected for the values asked so far; beyond the cap: 403, audited)
    expect_max_values: int = Field(default=16, ge=1, le=4096)
    # /v1/verify micro-batching (verifier.verify.batcher): concurrent callers share one decode and one audit commit
    # SQLite commits: FULL fsyncs every commit (survives power loss); NORMAL survives a process crash only
    sqlite_synchronous: Literal["FULL", "NORMAL"] = "FULL"
    verify_batching: bool = True
    verify_fast_path: bool = True  # well-formed POST /v1/verify answered without FastAPI routing (verify/fastpath.py)
    verify_batch_window_ms: float = Field(default=1.0, ge=0, le=100)
    verify_batch_max_texts: int = Field(default=256, ge=1)
    rate_limit_url: str | None = None  # redis://... shared quota counters; default: the broker if Redis, else memory

    # Jobs / serving
    broker_url: str | None = None  # e.g. redis://127.0.0.1:6379/0: /v1/jobs run on Celery workers (`hero worker`)
    job_max_texts: int = Field(default=100_000, ge=1)
    job_max_body_bytes: int = Field(default=64_000_000, ge=1024)
    job_batch_size: int = Field(default=256, ge=1, le=4096)  # bench_job_drain: 0.95 ms CPU/text at 32, 0.79 at 256
    # A drain on a CUDA device: the kernel needs thousands of texts in flight to fill the GPU (issue 28's table:
    # 20.8 M tok/s at 256 texts, 150 M at 4,096), while tokenizing the next batch overlaps with it.
    job_batch_size_cuda: int = Field(default=2048, ge=1, le=16384)
    job_lease_seconds: float = Field(default=60.0, gt=0)
    job_stale_seconds: float = Field(default=120.0, gt=0)  # re-enqueue a job untouched for this long
    job_recover_interval_seconds: float = Field(default=30.0, gt=0)
    job_max_attempts: int = Field(default=5, ge=1)
    # Finished jobs (and their sealed results) are purged this long after they ended, each purge an audit event
    # (`jobs.purge`; verifier/jobs/retention.py); 0 keeps them forever
    job_retention_seconds: float = Field(default=30 * 86400.0, ge=0)
    # A job becomes min(its batches, this) drain messages, so every free worker takes part (each claims batches
    # under SKIP LOCKED; an item is still stored and audited once)
    job_fanout_max: int = Field(default=16, ge=1, le=1024)
    # `hero worker` serves Prometheus metrics on this port (its prefork children merged; pending-items and
    # oldest-job gauges read from the database at scrape time); unset: none. Bound to HERO_WORKER_METRICS_HOST.
    worker_metrics_port: int | None = Field(default=None, ge=0, le=65535)
    worker_metrics_host: str = "127.0.0.1"
    # PostgreSQL connection pool per process (SQLAlchemy); HERO_DB_PGBOUNCER=1 for PgBouncer's transaction
    # pooling: no server-side prepared statements (psycopg prepare_threshold=None)
    db_pool_size: int = Field(default=10, ge=1, le=1000)
    db_max_overflow: int = Field(default=20, ge=0, le=1000)
    db_pgbouncer: bool = False
    broker_visibility_timeout: int = Field(default=3600, ge=1)
    # HERO_BROKER_TRANSPORT_OPTIONS: a JSON object merged into Celery's broker_transport_options; a Sentinel broker
    # (HERO_BROKER_URL=sentinel://h1:26379/0;sentinel://h2:26379/0) needs {"master_name": "<the monitored master>"}
    broker_transport_options: dict[str, object] = Field(default_factory=dict)
    worker_device: str = "auto"  # auto: cuda when available, else cpu (Celery workers and the in-process drain)
    # auth: a token whose role has metrics.read; default: public in dev mode, auth otherwise. A public /metrics
    # (and the HERO_METRICS_PORT bind) never carries verdict or disclosure counts (verifier/base/metrics.PRIVATE)
    metrics_exposure: Literal["public", "auth", "off"] | None = None
    metrics_port: int | None = Field(default=None, ge=1, le=65535)  # also serve /metrics on its own bind
    metrics_host: str = "127.0.0.1"
    docs_exposure: Literal["public", "off"] = "public"  # /docs, /redoc, /openapi.json ("off": never)
    # HERO_PUBLIC_DOCS: serve /docs, /redoc and /openapi.json unauthenticated; default: in dev mode only (outside
    # it the API's description is not handed to everyone who can reach the port)
    public_docs: bool | None = None
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=1, le=65535)
    log_level: str = "INFO"
    tracing: bool = False  # OpenTelemetry spans + trace ids in logs (otel extra; tracing.py); costs per request

    # Test hooks (honoured only with HERO_TEST_HOOKS=1): sleep before storing each job batch, so tests can
    # kill a worker or the API process mid-job.
    test_hooks: bool = False
    worker_test_delay_s: float = Field(default=0.0, ge=0)

    @field_validator("model_aware_edit_floors", mode="after")
    @classmethod
    def _floors(cls, v: tuple[float, ...]) -> tuple[float, ...]:
        if not all(0.0 < f < 1.0 for f in v):
            raise ValueError("every edit floor must be in (0, 1)")
        return v

    @field_validator("oidc_issuer", mode="before")
    @classmethod
    def _issuers(cls, v: object) -> object:
        if isinstance(v, str):
            v = json.loads(v) if v.strip().startswith("[") else [p for p in v.split(",") if p.strip()]
        if isinstance(v, list):
            return [check_issuer_url(url) for url in v]
        return v

    @field_validator("oidc_issuers", mode="before")
    @classmethod
    def _issuer_rules(cls, v: object) -> object:
        if isinstance(v, str):
            text = v.strip()
            if not text:
                return []
            if not text.startswith("["):  # a file (a Kubernetes ConfigMap, say)
                try:
                    text = Path(text).expanduser().read_text(encoding="utf-8")
                except OSError as exc:
                    raise ValueError(f"HERO_OIDC_ISSUERS: cannot read {text[:200]} "
                                     f"({exc.__class__.__name__})") from None
            try:
                v = json.loads(text)
            except ValueError:
                raise ValueError("HERO_OIDC_ISSUERS: not a JSON list of issuers") from None
        return v

    @model_validator(mode="after")
    def _issuers_once(self) -> Settings:
        named = [i.issuer for i in self.oidc_issuers]
        if len(set(named)) != len(named) or set(named) & set(self.oidc_issuer):
            raise ValueError("an OIDC issuer is named once, in HERO_OIDC_ISSUER or HERO_OIDC_ISSUERS")
        return self

    @field_validator("role_map", mode="after")
    @classmethod
    def _role_map(cls, v: dict[str, str]) -> dict[str, str]:
        if any(not k or not r or len(k) > 256 or len(r) > 64 for k, r in v.items()):
            raise ValueError("HERO_ROLE_MAP maps non-empty IdP role names to non-empty HeRo role names")
        return v

    @model_validator(mode="after")
    def _sentinel_master(self) -> Settings:
        if (self.broker_url or "").startswith("sentinel://") and not self.broker_transport_options.get("master_name"):
            raise ValueError('HERO_BROKER_URL=sentinel://... needs the master\'s name: HERO_BROKER_TRANSPORT_OPTIONS='
                             '{"master_name": "mymaster"}')
        return self

    @model_validator(mode="after")
    def _metrics_default(self) -> Settings:
        if self.metrics_exposure is None:
            self.metrics_exposure = "public" if self.dev_mode else "auth"
        if self.public_docs is None:
            self.public_docs = self.dev_mode
        return self

    @field_validator("home", mode="after")
    @classmethod
    def _expand(cls, v: Path) -> Path:
        return v.expanduser()

    @property
    def db_url(self) -> str:
        if self.database_url:
            url = self.database_url
            if url.startswith("postgresql://") or url.startswith("postgres://"):
                url = "postgresql+psycopg://" + url.split("://", 1)[1]
            return url
        return f"sqlite:///{self.home / 'hero.db'}"

    @property
    def is_sqlite(self) -> bool:
        return self.db_url.startswith("sqlite")

    @property
    def should_auto_migrate(self) -> bool:
        return self.is_sqlite if self.auto_migrate is None else self.auto_migrate

    @property
    def kek_path(self) -> Path:
        return (self.kek_dir or self.home / "kek").expanduser()

    @property
    def log_key_path(self) -> Path:
        return (self.log_key_file or self.home / "log" / "checkpoint.key").expanduser()

    @property
    def dev_key_dir(self) -> Path:
        return self.home / "dev-jwt"

    @property
    def drain_delay_s(self) -> float:
        return self.worker_test_delay_s if self.test_hooks else 0.0


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """This process's settings from the environment, read once (servers, workers, migrations)."""
    return Settings()
