//! Building and running the server: [`Application::build`] binds the socket
//! (so the port is known before serving), [`Application::run`] serves until
//! the shutdown token is cancelled.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::middleware;
use svc_core::{AccountService, DeviceService, KeyService, ProjectService, StorageQuota, Store};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::ServerConfig;
use crate::extract::BodyLimit;
use crate::ratelimit::RateLimiter;
use crate::registry::ModelRegistry;
use crate::serve::Limits;
use crate::state::AppState;
use crate::state::dashboard::Dashboard;
use crate::state::stored::Conversations;
use crate::tls::Tls;
use crate::{request_id, routes};

/// Token counts (`/v1/messages/count_tokens`) one key may have in flight.
const COUNTING_PER_KEY: usize = 1;

/// Token counts worked on at once in all: half the cores (at least one),
/// so that counting, which costs CPU but no tokens, leaves the engine the
/// rest whatever the keys send.
fn counting_at_once() -> usize {
    std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1))
}

/// TLS as configured (`tls_cert` and `tls_key`, both or neither), its
/// certificate read and checked against `public_url`.
fn tls(config: &ServerConfig) -> std::io::Result<Option<Arc<Tls>>> {
    let invalid = |message: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, message);
    let (cert, key) = match (&config.tls_cert, &config.tls_key) {
        (None, None) => return Ok(None),
        (Some(cert), Some(key)) => (cert, key),
        (Some(_), None) => {
            return Err(invalid(
                "tls_cert needs tls_key (the certificate's private key)".into(),
            ));
        }
        (None, Some(_)) => {
            return Err(invalid(
                "tls_key needs tls_cert (the certificate chain it belongs to)".into(),
            ));
        }
    };
    let tls = Tls::load(cert, key).map_err(invalid)?;
    if let Some(url) = &config.public_url
        && let Some(warning) = tls.check_public_url(url).map_err(invalid)?
    {
        tracing::warn!("{warning}");
    }
    Ok(Some(Arc::new(tls)))
}

/// A bound, ready-to-serve instance of the service.
pub struct Application {
    listener: TcpListener,
    router: Router,
    addr: SocketAddr,
    public_url: String,
    dashboard_url: String,
    accounts: AccountService,
    shutdown_grace: std::time::Duration,
    ledger: (Arc<crate::usage::Ledger>, Arc<dyn Store>),
    limits: Limits,
    metrics: Arc<crate::metrics::Metrics>,
    /// `/metrics` on an address of its own, when configured.
    metrics_server: Option<(TcpListener, Router)>,
    /// Days audit-log entries are kept (0: forever).
    audit_retention_days: u32,
    /// Rows of the request log waiting to be written.
    request_log: Arc<crate::request_log::RequestLog>,
    cache: Arc<crate::cache::ResponseCache>,
    /// How long request-log rows are kept (zero: none are written).
    request_log_retention: std::time::Duration,
    /// The trace exporter, with `otlp_endpoint`.
    tracer: Option<Arc<crate::otlp::Tracer>>,
    /// Runs batches' lines on this replica.
    batches: crate::batches::Runner,
    /// TLS on `listener`, when configured (`/metrics` on its own address
    /// stays plain: it is meant for a private interface).
    tls: Option<Arc<Tls>>,
}

impl Application {
    /// Binds `config.bind` and assembles the app around `store` and `models`.
    pub async fn build(
        config: ServerConfig,
        store: Arc<dyn Store>,
        models: ModelRegistry,
    ) -> std::io::Result<Self> {
        let listener = TcpListener::bind(config.bind).await?;
        let addr = listener.local_addr()?;
        let metrics_listener =
            match config.metrics_bind {
                Some(bind) => Some(TcpListener::bind(bind).await.map_err(|e| {
                    std::io::Error::new(e.kind(), format!("metrics_bind {bind}: {e}"))
                })?),
                None => None,
            };
        let tls = tls(&config)?;
        let scheme = if tls.is_some() { "https" } else { "http" };
        let public_url = config
            .public_url
            .as_ref()
            .map(|u| u.as_str().trim_end_matches('/').to_owned())
            .unwrap_or_else(|| format!("{scheme}://{addr}"));
        let dashboard = Dashboard::new(
            &public_url,
            config.dashboard_url.as_ref().map(url::Url::as_str),
            config.allow_signup,
        )
        .with_sso(&config.sso)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        let dashboard_url = dashboard.url.clone();
        let accounts = AccountService::new(store.clone());
        let limiter = match &config.redis_url {
            Some(url) => RateLimiter::redis(config.rate_limits, url.expose())
                .await
                .map_err(|e| std::io::Error::other(format!("cannot connect to Redis: {e}")))?,
            None => RateLimiter::local(config.rate_limits),
        };
        let budgets = crate::budget::Budgets::new(
            store.clone(),
            limiter.redis_connection(),
            config.prices.clone(),
            config.budget_alert_percent,
        );
        let conversations = Arc::new(Conversations::new(
            store.clone(),
            config.response_retention,
            StorageQuota {
                bytes: u64::try_from(config.response_quota_bytes).unwrap_or(u64::MAX),
                responses: config.response_quota_count,
            },
        ));
        let tracer = config
            .otlp_endpoint
            .as_ref()
            .map(|url| Arc::new(crate::otlp::Tracer::new(url)));
        let request_log = Arc::new(crate::request_log::RequestLog::new(
            !config.request_log_retention.is_zero(),
            config.prices.clone(),
        ));
        let cache = Arc::new(crate::cache::ResponseCache::new(
            config.response_cache_ttl,
            config.response_cache_bytes,
            store.clone(),
            limiter.redis_connection(),
        ));
        let models = Arc::new(models);
        let metrics = Arc::new(crate::metrics::Metrics::new(config.metrics_token.clone()));
        let admission = Arc::new(crate::admission::Admission {
            models: models.clone(),
            limiter,
            budgets,
            ledger: Arc::default(),
            metrics: metrics.clone(),
            watch_outcomes: cache.enabled(),
        });
        let batches = Arc::new(crate::state::files::Batches::new(
            &config,
            crate::endpoint::batchable(&crate::routes::ENDPOINTS).collect(),
        ));
        batches.make_dir()?;
        let mcp = crate::state::mcp::McpServers::new(&config.mcp).map_err(std::io::Error::other)?;
        let state = AppState {
            mcp: Arc::new(mcp),
            batches,
            cache: cache.clone(),
            admission,
            keys: KeyService::new(store.clone()),
            accounts: accounts.clone(),
            devices: DeviceService::new(store.clone(), config.device),
            projects: ProjectService::new(store.clone()),
            store,
            models,
            public_url: public_url.clone().into(),
            dashboard: Arc::new(dashboard),
            counting: Arc::new(crate::ratelimit::InFlight::new(
                "count_tokens",
                COUNTING_PER_KEY,
                counting_at_once(),
            )),
            metrics,
            body_limit: BodyLimit(config.max_body_bytes),
            conversations,
            audit_retention_days: config.audit_retention_days,
            request_log: request_log.clone(),
            tracer: tracer.clone(),
        };
        let ledger = (state.admission.ledger.clone(), state.store.clone());
        let metrics = state.metrics.clone();
        let metrics_route = || Router::from(routes::metrics());
        let mut api = routes::router();
        let metrics_server = match metrics_listener {
            Some(listener) => {
                let router = with_layers(
                    metrics_route().fallback(crate::error::ApiError::unknown_url),
                    &state,
                    config.max_body_bytes,
                );
                Some((listener, router))
            }
            None => {
                api = api.merge(metrics_route());
                None
            }
        };
        let router = with_layers(api, &state, config.max_body_bytes);
        let batches = crate::batches::Runner::new(state.clone(), router.clone());
        Ok(Application {
            batches,
            listener,
            router,
            addr,
            public_url,
            dashboard_url,
            accounts,
            shutdown_grace: config.shutdown_grace,
            ledger,
            limits: Limits::new(&config),
            metrics,
            metrics_server,
            audit_retention_days: config.audit_retention_days,
            request_log,
            cache,
            request_log_retention: config.request_log_retention,
            tracer,
            tls,
        })
    }

    /// Where `/metrics` is served when it has an address of its own.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_server
            .as_ref()
            .and_then(|(listener, _)| listener.local_addr().ok())
    }

    /// The address actually bound (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The bound address as a URL: `https://` when serving TLS.
    pub fn local_url(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// The `{base_url}` without `/v1`.
    pub fn public_url(&self) -> &str {
        &self.public_url
    }

    /// Where people reach the dashboard.
    pub fn dashboard_url(&self) -> &str {
        &self.dashboard_url
    }

    /// When no account exists yet, the one-time link at which the first
    /// admin sets up their account (for the operator's console only).
    pub async fn setup_link(&self) -> Result<Option<String>, svc_core::StoreError> {
        let token = self.accounts.setup_token().await?;
        Ok(token.map(|t| format!("{}/setup?token={t}", self.dashboard_url)))
    }

    /// Serves until `shutdown` is cancelled; then stops accepting
    /// connections, lets in-flight requests (streams included) finish for
    /// up to the configured grace period, and returns.
    pub async fn run(self, shutdown: CancellationToken) {
        let grace = self.shutdown_grace;
        let (ledger, store) = self.ledger;
        let stop_ledger = CancellationToken::new();
        let background = TaskTracker::new();
        background.spawn(sweep(
            store.clone(),
            self.audit_retention_days,
            self.request_log_retention,
            self.batches.settings(),
            stop_ledger.clone(),
        ));
        background.spawn(self.request_log.run(store.clone(), stop_ledger.clone()));
        background.spawn(self.cache.run(stop_ledger.clone()));
        // Batches stop with the listener: lines running then are left to
        // their leases (taken up at the next start, or by another replica).
        background.spawn(self.batches.run(shutdown.clone()));
        if let Some(tracer) = self.tracer {
            background.spawn(tracer.run(stop_ledger.clone()));
        }
        background.spawn(ledger.run(store, stop_ledger.clone()));
        let serve_api = crate::serve::serve(
            self.listener,
            self.router,
            shutdown.clone(),
            self.limits.clone(),
            self.metrics.clone(),
            self.tls,
        );
        let serve_metrics = async {
            if let Some((listener, router)) = self.metrics_server {
                crate::serve::serve(
                    listener,
                    router,
                    shutdown.clone(),
                    self.limits,
                    self.metrics,
                    None,
                )
                .await;
            }
        };
        let serve = async {
            tokio::join!(serve_api, serve_metrics);
        };
        tokio::select! {
            () = serve => {}
            () = async {
                shutdown.cancelled().await;
                tokio::time::sleep(grace).await;
            } => {
                tracing::warn!(grace_seconds = grace.as_secs_f64(), "grace period over: closing the connections still open");
            }
        }
        // The last usage counts are written before the server says it stopped.
        stop_ledger.cancel();
        background.close();
        background.wait().await;
    }
}

/// How often old audit-log entries, budget counts and batches are deleted.
const SWEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(3600);

/// Budget counts are kept this long after their window started: longer
/// than any window (a month), so only finished windows go.
const BUDGET_USAGE_KEPT_SECONDS: i64 = 32 * 86_400;

/// At start and every [`SWEEP_EVERY`] until `stop`, deletes audit-log
/// entries older than `retention_days` (0: none), the counts of budget
/// windows that ended, and batches past their retention with their files.
/// Replicas sweeping the same database at once delete the same rows;
/// nothing else is shared.
async fn sweep(
    store: Arc<dyn svc_core::Store>,
    retention_days: u32,
    request_log_retention: std::time::Duration,
    batches: Arc<crate::state::files::Batches>,
    stop: CancellationToken,
) {
    loop {
        crate::batches::sweep(store.as_ref(), &batches).await;
        crate::request_log::sweep(store.as_ref(), request_log_retention).await;
        if retention_days > 0 {
            match svc_core::audit::sweep(store.as_ref(), retention_days).await {
                Ok(0) => {}
                Ok(n) => {
                    tracing::info!(deleted = n, retention_days, "old audit-log entries deleted");
                }
                Err(e) => tracing::warn!(error = %e, "cannot delete old audit-log entries"),
            }
        }
        let before = svc_core::now() - BUDGET_USAGE_KEPT_SECONDS;
        if let Err(e) = store.sweep_budget_usage(before).await {
            tracing::warn!(error = %e, "cannot delete the counts of past budget windows");
        }
        tokio::select! {
            () = tokio::time::sleep(SWEEP_EVERY) => {}
            () = stop.cancelled() => return,
        }
    }
}

/// The layers every request goes through: metrics by route (inside the
/// routing, to know the route's pattern), the body limit, the request log
/// (which quotes the request id), and the request id with its log span
/// (outermost).
fn with_layers(routes: Router<AppState>, state: &AppState, max_body_bytes: usize) -> Router {
    routes
        .route_layer(middleware::from_fn_with_state(
            state.metrics.clone(),
            crate::layers::metrics,
        ))
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .layer(middleware::from_fn_with_state(
            (
                state.request_log.clone(),
                state.tracer.clone(),
                &crate::routes::ENDPOINTS[..],
            ),
            crate::layers::request_log,
        ))
        .layer(middleware::from_fn(request_id::middleware))
        .with_state(state.clone())
}
