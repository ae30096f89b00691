"""The operator's settings: one nested model, parsed from one place.

The Helm chart renders `config.yaml` into a ConfigMap; `vigil operator --config
FILE` reads it here, then a few environment variables override it (the history
DSN comes from a Secret, the namespace from the downward API). Every field says
its unit and why its default is what it is. Nothing else in the package reads
the environment.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator
from pydantic.alias_generators import to_camel

from vigil.core.logtail import DEFAULT_TAIL_BYTES, MAX_TAIL_BYTES, MIN_TAIL_BYTES
from vigil.model.durations import DURATION_PATTERN


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True)


class LeaderElection(_Section):
    """The trigger Lease, and the time bounds every API request of the operator derives from it.

    The leader stops (exits) when it has not renewed for the *renew deadline*, two thirds of
    `lease_duration_seconds` (10 s by default), so it has stopped before any standby may take the
    Lease; a renewal request may take what is left until that deadline. Every other API request
    the operator sends gives up after half the deadline (a third of the duration: 5 s by
    default; connect and read) unless it passes a longer timeout of its own (watches): a dead
    connection costs a thread seconds, never forever. A 429 answer is waited out as its
    Retry-After says, up to the renew deadline (the elector's own requests: half of what is left
    of the deadline after a renew period, 2.5 s by default), and the request sent again.
    """

    lease_name: str = Field("vigil-leader", description="Lease object in the operator namespace.")
    lease_duration_seconds: float = Field(
        15.0,
        gt=0,
        description="Seconds a leader's claim lasts unrenewed: the failover gap's upper bound. "
        "Two thirds of it is the renew deadline, and a third the timeout of every API request.",
    )
    renew_period_seconds: float = Field(
        5.0,
        gt=0,
        description="Seconds between renewals; must be below the renew deadline (two thirds of the "
        "duration): a third of the duration leaves room for a second try before the deadline.",
    )

    @field_validator("renew_period_seconds")
    @classmethod
    def _renewals_fit_the_deadline(cls, period: float, info: ValidationInfo) -> float:
        duration = info.data.get("lease_duration_seconds")
        if duration is not None and period >= duration * 2 / 3:
            raise ValueError(
                f"must be below the renew deadline, two thirds of leaseDurationSeconds ({duration * 2 / 3:g})"
            )
        return period


class Trigger(_Section):
    tick_milliseconds: int = Field(
        250,
        ge=10,
        description="Milliseconds between trigger passes at most; a pass also starts when an occurrence in "
        "its minute comes due, so this bounds only the wait for one inserted after the last pass.",
    )
    shards: int = Field(4, ge=1, le=64, description="Bucket objects per minute before overflow shards.")
    max_occurrences_per_bucket: int = Field(
        64,
        ge=1,
        le=5000,
        description="Occurrences per bucket object before the minute spills into further shards. "
        "Every marker written and every occurrence added rewrites the whole object on the API "
        "server, so small objects keep a busy minute cheap: 1,000 jobs on one minute fired with a "
        "pod lag p99 of 1.5 s at 64 against 2.6-2.9 s at 2,000. A minute holds at most "
        "shards x 256 x this many.",
    )
    workers: int = Field(
        32, ge=1, le=64, description="Jobs whose due occurrences one pass applies at once (API round trips overlap)."
    )
    rescan_seconds: float = Field(
        300.0, gt=0, description="Seconds between safety-net scans for pending buckets behind the cursor."
    )
    catalogue_scan_limit: int = Field(
        500, ge=1, description="Page size when listing buckets at leadership start."
    )


class Dispatch(_Section):
    max_running: int = Field(100, ge=1, description="Executions running at once, cluster-wide.")
    reserved_high: int = Field(10, ge=0, description="Slots only `high` priority may use.")
    per_namespace_max: int = Field(50, ge=1, description="Running executions per namespace.")
    running_after_seconds: float = Field(
        5.0,
        ge=0,
        le=3600,
        description="An attempt's pod on its node this long and not ended is recorded Running on "
        "its Execution; one that ends sooner goes from Ready straight to its outcome (one write). "
        "Time waiting for the scheduler or the node does not count.",
    )
    pending_limit_seconds: float = Field(
        300.0,
        ge=1,
        le=86400,
        description="How long an attempt's pod may stay Pending for a cause that needs a person (a "
        "missing Secret or ConfigMap, no node that fits) before the attempt fails as StuckPending: "
        "long enough for a Secret to be created or a node to come back.",
    )
    image_pull_limit_seconds: float = Field(
        60.0,
        ge=1,
        le=86400,
        description="How long an attempt's pod may stay Pending because its image cannot be pulled "
        "(ErrImagePull, ImagePullBackOff) before the attempt fails as ImagePullBackOff: almost "
        "always a wrong name, tag or pull secret, which no wait cures.",
    )


class Workflows(_Section):
    workers: int = Field(
        4, ge=1, le=64, description="Workflows advanced at once (never two passes on one workflow)."
    )
    rescan_seconds: float = Field(
        300.0,
        gt=0,
        description="Seconds between resyncs of the Workflow cache (no request to the API server): "
        "every workflow that needs a pass is queued again, the safety net behind the watch and "
        "timers (a new leader resumes every in-flight workflow from its watch's first list).",
    )
    ttl_after_finished: str = Field(
        "24h",
        pattern=DURATION_PATTERN,
        description="How long a finished workflow stays on the API server when its spec sets no "
        "ttlAfterFinished: a day to look at it with kubectl, after which the history database "
        "keeps its record (it is deleted only once its whole history is written there). 0s or "
        "empty keeps finished workflows forever.",
    )


class Notifier(_Section):
    url: str = Field(
        "",
        pattern=r"^(https?://[^\s/]+(/\S*)?)?$",
        description="The webhook every approval token is POSTed to, one JSON notification per approver "
        "of a waiting step (a chat or e-mail bridge that passes the approve/reject links on to that "
        "approver). Empty: no token is minted, and approvers decide with kubectl only.",
    )
    timeout_seconds: float = Field(
        5.0,
        gt=0,
        le=60,
        description="Seconds one POST may take (connect and answer): a slow bridge holds one of the "
        "approval outbox's two sender threads at most this long, never a workflow pass.",
    )
    retry_seconds: float = Field(
        30.0,
        gt=0,
        description="Seconds before a failed delivery is first tried again (the same token: the bridge "
        "can drop a repeat by its id); each failure in a row doubles it, up to recheckSeconds, each "
        "stretched by up to a fifth at random so that deliveries failing together spread out.",
    )


class KeyRotation(_Section):
    period: str = Field(
        "720h",
        pattern=DURATION_PATTERN,
        description="How long a signing key signs (30 days) before a replica replaces it with a new "
        "random key, keeping it as the previous key: a leaked key stops working on its own. 0s "
        "never rotates.",
    )
    overlap: str = Field(
        "24h",
        pattern=DURATION_PATTERN,
        description="How long after a rotation the previous key still verifies tokens: links already "
        "sent keep working while the new ones are delivered (a day covers a night and a weekend "
        "morning's backlog). 0s refuses them at once.",
    )


class Approvals(_Section):
    enabled: bool = Field(
        True,
        description="Send a signed token per approver of every waiting approval step to the notifier, "
        "and accept it on POST /approvals/{token}/approve|reject, so approvers can decide from a link.",
    )
    key_secret: str = Field(
        "vigil-approval-key",
        description="Secret in the operator namespace holding the HMAC key (and, after a rotation, the "
        "previous one); created with 32 random bytes when missing. Delete it to refuse every "
        "outstanding token at once.",
    )
    key_refresh_seconds: float = Field(
        60.0,
        gt=0,
        description="Seconds a replica trusts its cached key before reading the Secret again: how "
        "long a rotation takes to reach every replica.",
    )
    key_rotation: KeyRotation = KeyRotation()
    recheck_seconds: float = Field(
        600.0,
        gt=0,
        description="Seconds after which the leader checks a waiting workflow's tokens again "
        "unprompted (one read of the Workflow): repairs a missed or failed delivery.",
    )
    default_token_lifetime: str = Field(
        "24h",
        pattern=DURATION_PATTERN,
        description="How long a token lasts when its step has no timeout (a step with a timeout: "
        "until it can last be decided). A day, not a week: a link is a credential; a new token is "
        "sent when it ends and the step still waits.",
    )
    base_url: str = Field(
        "",
        alias="baseURL",
        description="Externally reachable URL of the operator's HTTP API, put in front of approveURL "
        "and rejectURL; empty sends path-only URLs (/approvals/<token>/approve).",
    )
    notifier: Notifier = Notifier()


class History(_Section):
    dsn: str = Field(
        "sqlite:////var/lib/vigil/history.db", description="SQLAlchemy URL of the history database."
    )
    retention_days: int = Field(30, ge=1, description="Days of execution history kept.")
    log_tail_bytes: int = Field(
        DEFAULT_TAIL_BYTES, ge=MIN_TAIL_BYTES, le=MAX_TAIL_BYTES,
        description="Bytes of the end of an attempt's log kept in the history database (jobs' "
        "`spec.logs` choose whose): enough for a stack trace, bounded since a tenant writes it.",
    )  # fmt: skip
    log_settle_seconds: float = Field(
        300.0, gt=0,
        description="Seconds retention waits for an ended pod's log tail to be stored before it "
        "deletes the pod anyway (a hung log read or a long database outage must not keep pods forever).",
    )  # fmt: skip


class NamespaceQuota(_Section):
    """Limits of what one namespace keeps unfinished in the queue store; unset: none."""

    max_ready_executions: int | None = Field(
        None, ge=0, description="Executions ready or leased (waiting or running, not finished) at once."
    )
    max_payload_bytes: int | None = Field(
        None, ge=0, description="Bytes of those executions' payloads (their JSON text) at once."
    )


class QueueQuota(_Section):
    """Per-namespace quotas of the queue store (vigil.queue.bounds): what the chart grants.

    A TaskQueue's `spec.quota` may lower its namespace's quota and never raise it (its authors are
    the namespace's own users); `namespaces` raises or lowers one namespace's ceiling.
    """

    max_ready_executions: int = Field(
        1_000_000,
        ge=1,
        description="Executions one namespace may keep ready or leased (not finished) at once: a "
        "million, a large backfill, not a runaway loop's.",
    )
    max_payload_bytes: int = Field(
        1024**3,
        ge=1,
        description="Bytes of those executions' payloads (JSON text) one namespace may keep at once: "
        "1 GiB of the shared database.",
    )
    namespaces: dict[str, NamespaceQuota] = Field(
        default_factory=dict,
        description="Namespaces with a quota of their own instead of the two above (unset fields: "
        "the defaults).",
    )


class QueueTenantRoles(_Section):
    """Each namespace's database role for its workers (vigil.queue.roles), and the Secret of its DSN."""

    enabled: bool = Field(
        True,
        description="Give each namespace with a TaskQueue a database role of its own and its DSN in the "
        "Secret `vigil-queue-credentials` of that namespace (needs CREATEROLE on the queue DSN's user); "
        "off: no role is made, and workers need a DSN from elsewhere.",
    )
    max_connections: int = Field(
        20, ge=1, le=10_000,
        description="Sessions one namespace's workers may hold at once (the role's CONNECTION LIMIT): "
        "each worker process holds two.",
    )
    statement_timeout_seconds: float = Field(
        60.0, gt=0, le=3600,
        description="A statement of a namespace's role is cancelled after this (every worker statement "
        "takes milliseconds).",
    )
    idle_in_transaction_seconds: float = Field(
        30.0, gt=0, le=3600,
        description="A session of a namespace's role idle inside a transaction is ended after this, "
        "so no tenant holds row locks it is not using.",
    )
    host: str = Field(
        "",
        max_length=253,
        description="The database host the namespaces' DSNs name (empty: the queue DSN's own), when "
        "workers reach the server by another name than the operator does.",
    )


class Queue(_Section):
    dsn: str = Field(
        "",
        pattern=r"^$|^postgres(ql)?://|=",
        description="PostgreSQL connection string (libpq `key=value` or `postgresql://` URL) of the "
        "volume tier's queue store; empty turns the volume tier off. It may be the history "
        "database: the store keeps to its own schema, `vigil_queue`.",
    )
    tenant_roles: QueueTenantRoles = Field(default_factory=QueueTenantRoles)
    api_password: str = Field(
        "",
        repr=False,
        max_length=256,
        description="Password of the HTTP API's own database role (VIGIL_QUEUE_API_PASSWORD, from the "
        "chart's Secret `<release>-queue-api`, kept across upgrades). With tenant roles on, the API logs "
        "in as that role, which holds no table, and acts for a namespace only as that namespace's API "
        "role (vigil.queue.apistore); empty: the API reaches the store as the queue DSN's owner, and "
        "says so in a warning at start.",
    )
    shards: int = Field(
        8,
        ge=1,
        le=256,
        description="Shards of the volume tier's trigger, by job id; each is fired by whichever "
        "replica holds its Lease, so replicas share them and take over a dead one's.",
    )
    status_interval_seconds: float = Field(
        5.0,
        gt=0,
        le=300,
        description="Seconds between the leader's TaskQueue passes: each publishes changed "
        "declarations to the store and refreshes every TaskQueue's status (counts, oldest ready "
        "age, rates) from one query, so status lags the store by at most this, never per execution.",
    )
    pass_deadline_seconds: float = Field(
        30.0,
        gt=0,
        le=600,
        description="Seconds a trigger shard's pass may wait on the queue store before its connection is "
        "broken off and the pass retried (a pass takes milliseconds; only a silent path takes this long).",
    )
    unreachable_after_seconds: float = Field(
        60.0,
        gt=0,
        le=3600,
        description="Seconds of failed passes after which a replica that cannot reach the queue store "
        "hands all its trigger shards to the others, until it reaches the store again.",
    )
    attempts_retention_days: int = Field(
        14,
        ge=1,
        le=366,
        description="Days the store keeps each attempt's row (`vigil_queue.attempts`), counted from its "
        "execution's scheduled day (UTC): the table has a partition per day, and a day's partition "
        "is dropped once it is older than this. Two weeks, to read a failure's attempts after a "
        "holiday; at most a year, because a timeline's read probes every partition kept.",
    )
    finished_retention_days: int = Field(
        7,
        ge=1,
        le=366,
        description="Days the store keeps a succeeded or cancelled execution after it finished (a "
        "TaskQueue's finishedRetention says otherwise for its queue), and a deleted job after its "
        "deletion: the history database is the long-term record; a week to read last week's timelines.",
    )
    quota: QueueQuota = Field(
        default_factory=QueueQuota, description="Per-namespace quotas on what the store keeps unfinished."
    )
    high_priority_namespaces: list[str] | None = Field(
        None,
        description="Namespaces whose submissions to the HTTP API may have a priority above normal "
        "(below 0): reserved capacity is for whom the cluster's administrator chose, as "
        "`spec.priority: high` is (the chart sets it from admission.highPriority.namespaces, and its "
        "admission policy checks `task:` jobs alike). Unset: not checked here.",
    )


class Watchdog(_Section):
    enabled: bool = Field(True, description="Assert expected intervals, chains, freshness, suspensions.")
    mode: str = Field(
        "operator",
        pattern="^(operator|separate)$",
        description="operator: the trigger leader runs it; separate: only `vigil watchdog` (its own "
        "Deployment, so it does not share the trigger's blind spots) runs it.",
    )
    interval_seconds: float = Field(30.0, gt=0, description="Seconds between watchdog passes.")
    suspended_max_age: str = Field(
        "168h", pattern=DURATION_PATTERN, description="A job suspended longer than this is reported."
    )
    lease_name: str = Field("vigil-watchdog", description="Lease the separate watchdog replicas elect on.")


class Audit(_Section):
    interval_seconds: float = Field(300.0, gt=0, description="Seconds between schedule-integrity audits.")
    repair: bool = Field(
        False,
        description="Re-insert a broken chain's next occurrence when found: a ScheduledJob's, and with "
        "queue.dsn a catalogued recurring job's (the volume tier's audit).",
    )
    chain_grace_seconds: float = Field(
        120.0,
        gt=0,
        description="Seconds a chain head may be late (or a new job may lack one) before it counts as broken.",
    )


class Tls(_Section):
    """The API listener's certificate: files mounted from a Secret (the chart's, or yours)."""

    cert_file: str = Field(
        "",
        description="PEM certificate chain the API serves (a Secret's tls.crt, mounted); empty: the API "
        "answers plain HTTP, for tests and a mesh that terminates TLS itself. Read at start, and "
        "again within a minute of a change (a renewed Secret).",
    )
    key_file: str = Field(
        "",
        description="PEM private key of cert_file (the Secret's tls.key); set with cert_file or not at all.",
    )

    @model_validator(mode="after")
    def _both_or_neither(self) -> Tls:
        if bool(self.cert_file) != bool(self.key_file):
            raise ValueError("http.tls: certFile and keyFile are set together or not at all")
        return self


class Http(_Section):
    metrics_port: int = Field(9090, ge=0, le=65535, description="Prometheus metrics; 0 disables.")
    api_port: int = Field(8080, ge=0, le=65535, description="JSON API (and /healthz, /readyz); 0 disables.")
    health_port: int = Field(
        8081,
        ge=0,
        le=65535,
        description="/healthz and /readyz on a listener of their own (the kubelet's probes): nothing "
        "a client of the API does (idle sockets, slow writers, a full worker pool) can make a probe "
        "wait; 0 disables.",
    )
    workers: int = Field(
        8,
        ge=1,
        le=64,
        description="API requests answered at once: the threads that run the routes' blocking calls "
        "(the API server's reviews, the history database, the queue store); four times as many may "
        "wait for one, the rest get 503 at once. Idle and slow connections hold none of them.",
    )
    request_timeout_seconds: float = Field(
        30.0,
        gt=0,
        le=300,
        description="Seconds one API request may take from its whole head to its answer (its body "
        "read included); past it the caller gets 503 and the handler is freed.",
    )
    read_timeout_seconds: float = Field(
        10.0,
        gt=0,
        le=300,
        description="Seconds a request's line and headers may take to arrive, from the connection's "
        "opening or the first byte after an answer: a client that sends nothing, or a byte now and "
        "then, is closed after it.",
    )
    idle_timeout_seconds: float = Field(
        5.0,
        ge=1,
        le=300,
        description="Seconds a keep-alive connection may idle between requests before it is closed.",
    )
    connections_per_peer: int = Field(
        64,
        ge=1,
        le=4096,
        description="Connections one client address may hold open at once; more are closed "
        "unanswered, so one pod cannot take every connection the operator allows (1024).",
    )
    auth_cache_seconds: float = Field(
        10.0,
        ge=0,
        le=300,
        description="Seconds a TokenReview or SubjectAccessReview answer is reused (0: never): how "
        "long a revoked token or RoleBinding may still be honoured, against one review per request.",
    )
    tls: Tls = Tls()
    token_audiences: list[str] = Field(
        ["vigil"],
        min_length=1,
        description="Audiences a caller's token is reviewed for (TokenReview spec.audiences); a token "
        "bound to none of them is refused (401). `vigil` keeps tokens minted for other servers out "
        "(kubectl create token SA --audience vigil); add the API server's own audience (e.g. "
        "https://kubernetes.default.svc.cluster.local) while clients move to audience-bound tokens.",
    )


class Logging(_Section):
    format: str = Field("text", pattern="^(text|json)$")
    level: str = Field("INFO", pattern="^(DEBUG|INFO|WARNING|ERROR)$")


class Settings(_Section):
    namespace: str = Field("vigil-system", description="Where buckets and the leader Lease live.")
    leader_election: LeaderElection = LeaderElection()
    trigger: Trigger = Trigger()
    dispatch: Dispatch = Dispatch()
    workflows: Workflows = Workflows()
    approvals: Approvals = Approvals()
    history: History = History()
    queue: Queue = Queue()
    watchdog: Watchdog = Watchdog()
    audit: Audit = Audit()
    http: Http = Http()
    logging: Logging = Logging()


def load_settings(path: Path | None, environ: Mapping[str, str] | None = None) -> Settings:
    """Read the config file (if any), then apply the environment overrides."""
    env = os.environ if environ is None else environ
    raw: dict[str, object] = {}
    if path is not None:
        loaded = yaml.safe_load(path.read_text()) or {}
        if not isinstance(loaded, dict):
            raise ValueError(f"{path}: the config must be a mapping, got {type(loaded).__name__}")
        raw = loaded
    if env.get("POD_NAMESPACE") and "namespace" not in raw:
        raw["namespace"] = env["POD_NAMESPACE"]
    for variable, section_name, key in (
        ("VIGIL_HISTORY_DSN", "history", "dsn"),
        ("VIGIL_QUEUE_DSN", "queue", "dsn"),
        ("VIGIL_QUEUE_API_PASSWORD", "queue", "apiPassword"),
    ):
        if env.get(variable):
            section = raw.get(section_name) or {}
            if not isinstance(section, dict):
                raise ValueError(f"config: `{section_name}` must be a mapping")
            raw[section_name] = {**section, key: env[variable]}
    return Settings.model_validate(raw)
