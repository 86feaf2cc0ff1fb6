"""Settings for the Chassis control plane.

Everything production needs comes from the environment (DATABASE_URL, CELERY_BROKER_URL,
SECRET_KEY, ALLOWED_HOSTS, DEBUG, ...). Without it the embedded defaults apply: SQLite and a
filesystem Celery broker under ``var/``, so a fresh clone runs with no services at all.
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

from csp.constants import NONE, SELF
from django.core.exceptions import ImproperlyConfigured

from controlplane.database import database_settings
from controlplane.env import env_bool, env_int, env_list, env_url

REPO_DIR = Path(__file__).resolve().parents[2]
VAR_DIR = Path(os.environ.get("CHASSIS_VAR_DIR", REPO_DIR / "var")).resolve()
VAR_DIR.mkdir(parents=True, exist_ok=True)

DEBUG = env_bool("DEBUG", True)

_DEV_SECRET = "chassis-embedded-development-key-not-for-production"
SECRET_KEY = os.environ.get("SECRET_KEY", "")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured("SECRET_KEY must be set when DEBUG is off")
    SECRET_KEY = _DEV_SECRET
elif not DEBUG and SECRET_KEY == _DEV_SECRET:
    raise ImproperlyConfigured("SECRET_KEY is the embedded development key; set a real one when DEBUG is off")

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"] if DEBUG else [])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

# Over plain HTTP a browser drops Secure cookies, and without its CSRF cookie nobody can log in:
# Secure cookies and HSTS follow SERVED_OVER_HTTPS, not DEBUG.
SERVED_OVER_HTTPS = env_bool("SERVED_OVER_HTTPS", False)
SECURE_COOKIES = env_bool("SECURE_COOKIES", SERVED_OVER_HTTPS)
SESSION_COOKIE_SECURE = SECURE_COOKIES
CSRF_COOKIE_SECURE = SECURE_COOKIES
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", False)
SECURE_REDIRECT_EXEMPT = [r"^health$"]
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 365 * 24 * 3600 if SERVED_OVER_HTTPS else 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
BEHIND_TLS_PROXY = env_bool("BEHIND_TLS_PROXY", SERVED_OVER_HTTPS)
if BEHIND_TLS_PROXY:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# Every response; the UI loads only its own scripts and styles (htmx's inline indicator style is
# off in base.html), Swagger UI included (its init script is a separate request).
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF],
        "img-src": [SELF, "data:"],
        "connect-src": [SELF],
        "font-src": [SELF],
        "object-src": [NONE],
        "base-uri": [SELF],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
    }
}

# UI login lockout (django-axes): this many failures for one username from one address lock that
# pair out for the cool-off; `manage.py axes_reset` (or axes_reset_username) unlocks at once.
AXES_FAILURE_LIMIT = env_int("LOGIN_FAILURE_LIMIT", 5)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("LOGIN_LOCKOUT_MINUTES", 15))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "controlplane.web.lockout.locked_out"
if BEHIND_TLS_PROXY:
    AXES_IPWARE_PROXY_COUNT = 1
    AXES_IPWARE_META_PRECEDENCE_ORDER = ("HTTP_X_FORWARDED_FOR", "REMOTE_ADDR")
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",  # first: refuses a locked-out login before the password check
    "django.contrib.auth.backends.ModelBackend",
]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "django_tables2",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI assets served locally, no CDN
    "rest_framework.authtoken",
    "django_prometheus",  # request/response/database metrics on /metrics (controlplane.telemetry)
    "controlplane.telemetry",
    "controlplane.api",
    "controlplane.fleet",
    "controlplane.checkpoints",
    "controlplane.serving",
    "controlplane.benchmarks",
    "controlplane.web",
    "axes",
]

MIDDLEWARE = [
    "django_prometheus.middleware.PrometheusBeforeMiddleware",  # first: times the whole stack
    "django.middleware.security.SecurityMiddleware",
    "csp.middleware.CSPMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_prometheus.middleware.PrometheusAfterMiddleware",  # views, methods, status codes
    "axes.middleware.AxesMiddleware",  # last, as django-axes requires
]

ROOT_URLCONF = "controlplane.urls"
WSGI_APPLICATION = "controlplane.wsgi.application"
ASGI_APPLICATION = "controlplane.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "controlplane.web.context_processors.roles",
            ],
        },
    },
]

DATABASES = {
    "default": database_settings(
        os.environ.get("DATABASE_URL"), VAR_DIR / "chassis.sqlite3", env_int("DATABASE_CONN_MAX_AGE", 0)
    )
}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
STATIC_ROOT.mkdir(exist_ok=True)
WHITENOISE_USE_FINDERS = DEBUG
LOGIN_URL = "/login/"
LOGIN_REDIRECT_URL = "/"

# --- Celery -----------------------------------------------------------------------------------
CELERY_BROKER_DIR = VAR_DIR / "celery"
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "filesystem://")
CELERY_RESULT_BACKEND = (
    os.environ.get(
        "CELERY_RESULT_BACKEND",
        CELERY_BROKER_URL if CELERY_BROKER_URL.startswith(("redis://", "rediss://")) else "",
    )
    or f"file://{CELERY_BROKER_DIR / 'results'}"
)
if CELERY_BROKER_URL.startswith("filesystem://"):
    for sub in ("out", "processed", "control", "results"):
        (CELERY_BROKER_DIR / sub).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(CELERY_BROKER_DIR / "out"),
        "data_folder_out": str(CELERY_BROKER_DIR / "out"),
        "processed_folder": str(CELERY_BROKER_DIR / "processed"),
        "control_folder": str(CELERY_BROKER_DIR / "control"),
        "store_processed": False,
    }
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_DEFAULT_QUEUE = os.environ.get("CELERY_TASK_DEFAULT_QUEUE", "controlplane")
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BEAT_SCHEDULE: dict[str, dict] = {
    "reconcile": {"task": "serving.reconcile", "schedule": float(env_int("CHASSIS_RECONCILE_INTERVAL_S", 5))},
    "scrape-metrics": {
        "task": "serving.scrape_metrics",
        "schedule": float(env_int("CHASSIS_SCRAPE_INTERVAL_S", 5)),
    },
    "check-heartbeats": {
        "task": "fleet.check_heartbeats",
        "schedule": float(env_int("CHASSIS_HEARTBEAT_CHECK_INTERVAL_S", 5)),
    },
    "benchmark-schedules": {
        "task": "benchmarks.run_due_schedules",
        "schedule": float(env_int("CHASSIS_BENCHMARK_SCHEDULE_INTERVAL_S", 60)),
    },
}

# --- Serving machinery (seconds unless named otherwise) -----------------------------------------
CHASSIS_SERVING = {
    "NODE_LOST_AFTER_S": env_int("CHASSIS_NODE_LOST_AFTER_S", 30),
    "LAUNCH_TIMEOUT_S": env_int("CHASSIS_LAUNCH_TIMEOUT_S", 300),
    "LAUNCH_GRACE_S": env_int("CHASSIS_LAUNCH_GRACE_S", 30),  # launching with no process yet
    "SCHEDULED_STALE_S": env_int("CHASSIS_SCHEDULED_STALE_S", 15),  # republish a launch after this
    "DRAIN_TIMEOUT_S": env_int("CHASSIS_DRAIN_TIMEOUT_S", 30),
    "STOP_TIMEOUT_S": env_int("CHASSIS_STOP_TIMEOUT_S", 10),  # SIGTERM -> SIGKILL
    "RELAUNCH_BACKOFF_S": env_int("CHASSIS_RELAUNCH_BACKOFF_S", 2),
    "RELAUNCH_BACKOFF_MAX_S": env_int("CHASSIS_RELAUNCH_BACKOFF_MAX_S", 300),
    # A replica failing this many times in a row for the same reason is no longer relaunched (0: never).
    "RELAUNCH_GIVE_UP_AFTER": env_int("CHASSIS_RELAUNCH_GIVE_UP_AFTER", 3),
    # A rolling update removes an old replica once a new one has been ready this long (gateways refresh).
    "ROLLOUT_MIN_READY_S": env_int("CHASSIS_ROLLOUT_MIN_READY_S", 5),
    "SCRAPE_TIMEOUT_S": 3,
    "SAMPLE_RETENTION_H": env_int("CHASSIS_SAMPLE_RETENTION_H", 24),
}
# Deployment charts read history older than SAMPLE_RETENTION_H from this Prometheus' query API.
CHASSIS_PROMETHEUS_URL = env_url("CHASSIS_PROMETHEUS_URL")
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")

# --- Benchmarks (controlplane/benchmarks/conf.py holds the other defaults) ------------------------
# When set, benchmark runs go through the gateway instead of straight to the ready replicas.
CHASSIS_GATEWAY_URL = os.environ.get("CHASSIS_GATEWAY_URL", "")
CHASSIS_BENCHMARKS = {
    "REGRESSION_K": float(os.environ.get("CHASSIS_BENCHMARK_REGRESSION_K", "3")),
    "REGRESSION_MIN_PCT": float(os.environ.get("CHASSIS_BENCHMARK_REGRESSION_MIN_PCT", "10")),
    "API_KEY": os.environ.get("CHASSIS_BENCHMARK_API_KEY", ""),
}

# --- REST framework ---------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "controlplane.api.authentication.BearerTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["controlplane.api.permissions.RolePermission"],
    "DEFAULT_SCHEMA_CLASS": "controlplane.api.schema.ChassisAutoSchema",
    "DEFAULT_FILTER_BACKENDS": [
        "django_filters.rest_framework.DjangoFilterBackend",
        "rest_framework.filters.OrderingFilter",
    ],
    "DEFAULT_PAGINATION_CLASS": "controlplane.api.pagination.LimitOffsetPagination",
    "EXCEPTION_HANDLER": "controlplane.api.exceptions.exception_handler",
    "PAGE_SIZE": 50,
    # Per client address (anon, token_failures) or user: high enough for scripts and the test suite,
    # low enough that guessing tokens is hopeless.
    "DEFAULT_THROTTLE_CLASSES": [
        "controlplane.api.throttling.AnonThrottle",
        "controlplane.api.throttling.UserThrottle",
    ],
    "NUM_PROXIES": 1 if BEHIND_TLS_PROXY else 0,  # else a client picks its own address in X-Forwarded-For
    "DEFAULT_THROTTLE_RATES": {
        "anon": os.environ.get("API_THROTTLE_ANON", "600/min"),
        "user": os.environ.get("API_THROTTLE_USER", "6000/min"),
        "token_failures": os.environ.get("API_THROTTLE_TOKEN_FAILURES", "60/min"),
    },
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Chassis admin API",
    "DESCRIPTION": "Fleet, checkpoints, deployments, replicas and benchmarks of a Chassis installation.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "ENUM_NAME_OVERRIDES": {
        "ReplicaStateEnum": "controlplane.serving.choices.ReplicaState",
        "NodeStateEnum": "controlplane.fleet.choices.NodeState",
        "CheckpointStateEnum": "controlplane.checkpoints.choices.CheckpointState",
        "BenchmarkRunStateEnum": "controlplane.benchmarks.choices.RunState",
    },
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
}
