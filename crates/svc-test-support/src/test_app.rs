//! [`TestApp`]: the real server, built by [`Application::build`] as in
//! production, on port 0 with a fresh database and the fake models.

use std::net::SocketAddr;
use std::sync::Arc;

use svc_core::{AccountService, Actor, KeyOrigin, KeyService, NewKey, UserRecord};
use svc_server::{Application, ModelRegistry, ServerConfig};
use svc_store::SqlStore;
use tempfile::TempDir;
use tokio_util::sync::CancellationToken;

use crate::fake_engine::{Probe, fake_models};

/// Which database a test server uses.
#[derive(Debug, Clone)]
pub enum Database {
    /// A new SQLite file in a temporary directory.
    Sqlite,
    /// An existing database (e.g. an isolated PostgreSQL schema).
    Url(String),
}

/// A running server and what a test needs to talk to it.
pub struct TestApp {
    pub addr: SocketAddr,
    /// `http://127.0.0.1:<port>`.
    pub base_url: String,
    pub client: reqwest::Client,
    pub store: Arc<SqlStore>,
    pub keys: KeyService,
    pub accounts: AccountService,
    pub probe: Arc<Probe>,
    /// The database URL, for a second process on the same data.
    pub database_url: String,
    shutdown: CancellationToken,
    server: Option<tokio::task::JoinHandle<()>>,
    _dir: Option<TempDir>,
}

impl TestApp {
    /// A server on a fresh SQLite database.
    pub async fn spawn() -> TestApp {
        TestApp::spawn_with(Database::Sqlite, ServerConfig::default()).await
    }

    /// A server on `database` with `config` (its `bind` is replaced by port 0).
    pub async fn spawn_with(database: Database, config: ServerConfig) -> TestApp {
        let probe = Arc::new(Probe::default());
        TestApp::spawn_models(database, config, fake_models(probe.clone()), probe).await
    }

    /// A server with the given models.
    pub async fn spawn_models(
        database: Database,
        mut config: ServerConfig,
        models: ModelRegistry,
        probe: Arc<Probe>,
    ) -> TestApp {
        // The app's own directory: its SQLite file and its files (the
        // Batch API's), deleted with it.
        let dir = tempfile::tempdir().expect("temporary directory");
        let database_url = match database {
            Database::Sqlite => SqlStore::data_dir_url(dir.path()).expect("sqlite url"),
            Database::Url(url) => url,
        };
        if config.files_dir.is_none() {
            config.files_dir = Some(dir.path().join("files"));
        }
        let store = Arc::new(
            SqlStore::connect(&database_url)
                .await
                .expect("open the store"),
        );
        config.bind = SocketAddr::from(([127, 0, 0, 1], 0));
        let app = Application::build(config, store.clone(), models)
            .await
            .expect("build the application");
        let addr = app.local_addr();
        let shutdown = CancellationToken::new();
        let server = tokio::spawn(app.run(shutdown.clone()));
        TestApp {
            addr,
            base_url: format!("http://{addr}"),
            client: reqwest::Client::new(),
            keys: KeyService::new(store.clone()),
            accounts: AccountService::new(store.clone()),
            store,
            probe,
            database_url,
            shutdown,
            server: Some(server),
            _dir: Some(dir),
        }
    }

    /// Asks the server to shut down (as SIGTERM does in `svc serve`) and
    /// waits until it has stopped; returns how long that took.
    pub async fn shut_down(&mut self) -> std::time::Duration {
        let started = std::time::Instant::now();
        self.shutdown.cancel();
        if let Some(server) = self.server.take() {
            server.await.expect("server task");
        }
        started.elapsed()
    }

    /// `base_url` + `path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base_url)
    }

    /// The text of `GET /metrics` (no metrics token).
    pub async fn metrics(&self) -> String {
        let response = self.client.get(self.url("/metrics")).send().await;
        response
            .expect("GET /metrics")
            .text()
            .await
            .expect("the /metrics body")
    }

    /// A new active key, as its secret string.
    pub async fn create_key(&self) -> String {
        self.create_key_expiring(None).await
    }

    /// A new key that expires after `seconds`.
    pub async fn create_key_expiring(&self, seconds: Option<i64>) -> String {
        let (key, _) = self
            .keys
            .create(
                NewKey {
                    name: "test".into(),
                    owner_id: None,
                    created_via: KeyOrigin::Cli,
                    expires_in: seconds,
                    scope: Default::default(),
                },
                &Actor::Operator,
            )
            .await
            .expect("create a key");
        key.expose().to_owned()
    }

    /// A new key of `owner` (`None`: the operator's) with `scope`, as its
    /// secret string.
    pub async fn create_scoped_key(
        &self,
        owner: Option<&svc_core::UserId>,
        scope: svc_core::KeyScope,
    ) -> String {
        let (key, _) = self
            .keys
            .create(
                NewKey {
                    name: "scoped".into(),
                    owner_id: owner.cloned(),
                    created_via: KeyOrigin::Cli,
                    expires_in: None,
                    scope,
                },
                &Actor::Operator,
            )
            .await
            .expect("create a key");
        key.expose().to_owned()
    }

    /// A new project `name` allowing `models`, stored directly.
    pub async fn create_project(
        &self,
        name: &str,
        models: svc_core::ModelAccess,
    ) -> svc_core::ProjectRecord {
        let project = svc_core::ProjectRecord {
            id: svc_core::ProjectId::generate(),
            name: name.into(),
            created_at: 1,
            archived_at: None,
            allowed_models: models,
            allowed_mcp_servers: svc_core::McpServerAccess::any(),
            budget: None,
        };
        svc_core::ProjectStore::insert_project(self.store.as_ref(), &project)
            .await
            .expect("store a project");
        project
    }

    /// An admin key of the operator (it reaches every project through the
    /// admin API), as its secret string.
    pub async fn create_admin_key(&self) -> String {
        self.create_scoped_key(
            None,
            svc_core::KeyScope {
                kind: svc_core::KeyKind::Admin(svc_core::AdminReach::Organization),
                ..svc_core::KeyScope::default()
            },
        )
        .await
    }

    /// A dashboard account with `password`.
    pub async fn create_user(&self, email: &str, password: &str, admin: bool) -> UserRecord {
        self.accounts
            .create_user(email, password, admin, Some(&Actor::Operator))
            .await
            .expect("create a user")
    }

    /// A [`Browser`](crate::Browser) on this server, signed in as a new
    /// user `email` (password `password123`).
    pub async fn signed_in(&self, email: &str, admin: bool) -> (crate::Browser, UserRecord) {
        let user = self.create_user(email, "password123", admin).await;
        let browser = crate::Browser::new(&self.base_url);
        browser.sign_in(email, "password123").await;
        (browser, user)
    }

    /// POSTs JSON to `/v1/chat/completions` with `key`.
    pub async fn chat(&self, key: &str, body: &serde_json::Value) -> reqwest::Response {
        self.client
            .post(self.url("/v1/chat/completions"))
            .bearer_auth(key)
            .json(body)
            .send()
            .await
            .expect("send the request")
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        self.shutdown.cancel();
        // The server may still be writing there as it stops (a usage row, a
        // new SQLite connection's files): a file made while the directory
        // is being removed fails the removal, and TempDir's own drop would
        // leave the directory behind without a word. So remove it here,
        // again while it keeps gaining files.
        if let Some(dir) = self._dir.take() {
            let path = dir.path().to_owned();
            for _ in 0..50 {
                match std::fs::remove_dir_all(&path) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                        std::thread::sleep(std::time::Duration::from_millis(10));
                    }
                    _ => break,
                }
            }
        }
    }
}
