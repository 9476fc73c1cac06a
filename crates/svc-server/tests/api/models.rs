//! Local models loaded and unloaded while the server runs: their residency
//! in `GET /v1/models` (absent for a model without one, as an upstream's),
//! `POST /v1/admin/models/load` and `…/unload` for organization-wide admin
//! keys only (audited), the `svc_model_*` series of `/metrics`, and the
//! dashboard's Models page with its Load and Unload buttons for
//! organization owners. The models here are a fake whose residency a test
//! sets and reads.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use svc_core::{
    AdminReach, Engine, EngineError, EngineStatus, EventStream, GenerateRequest, KeyKind, KeyScope,
    ModelAccess, ProjectId, ProjectRole, ProjectStore, Residence, Residency, ResidencyState,
    Unload,
};
use svc_server::{Fallbacks, ModelRegistry, ModelRoute, ServerConfig};
use svc_store::testing::{TestSchema, postgres_url};
use svc_test_support::{Database, Probe, TestApp, fake_models};

use crate::expect_error;

on_both_databases!(organization_admins_load_and_unload_through_the_admin_api);

/// What a loaded fake model holds.
const MEMORY: u64 = 300 * 1024 * 1024;
/// What the pinned fake model holds.
const PINNED_MEMORY: u64 = 3 * 1024 * 1024 * 1024;

/// A local model's residence whose state the test sets: loads take 0.25 s
/// (as counted), fail while `fail` is set, and an unload waits for the
/// running requests while `busy` is set, unless forced (then `ended` is
/// set: it ended them).
#[derive(Default)]
struct Resident {
    residency: Mutex<Residency>,
    busy: AtomicBool,
    fail: AtomicBool,
    ended: AtomicBool,
}

impl Resident {
    fn new(residency: Residency) -> Arc<Self> {
        Arc::new(Resident {
            residency: Mutex::new(residency),
            ..Resident::default()
        })
    }

    fn state(&self) -> ResidencyState {
        self.residency.lock().unwrap().state
    }
}

#[async_trait::async_trait]
impl Residence for Resident {
    async fn load(&self) -> Result<(), EngineError> {
        let mut r = self.residency.lock().unwrap();
        if self.fail.load(Ordering::SeqCst) {
            r.load_failures += 1;
            return Err(EngineError::Unavailable(
                "the model needs 2.0 GiB and 1.0 GiB of the memory budget is free".into(),
            ));
        }
        if r.state != ResidencyState::Loaded {
            r.state = ResidencyState::Loaded;
            r.memory_bytes = MEMORY;
            r.loads += 1;
            r.load_seconds += 0.25;
        }
        Ok(())
    }

    fn unload(&self, force: bool) -> Unload {
        let mut r = self.residency.lock().unwrap();
        if r.state == ResidencyState::Unloaded {
            Unload::NotLoaded
        } else if self.busy.load(Ordering::SeqCst) && !force {
            Unload::WhenIdle
        } else {
            if self.busy.swap(false, Ordering::SeqCst) {
                self.ended.store(true, Ordering::SeqCst);
            }
            r.state = ResidencyState::Unloaded;
            r.memory_bytes = 0;
            r.unloads += 1;
            Unload::Unloaded
        }
    }

    fn residency(&self) -> Residency {
        self.residency.lock().unwrap().clone()
    }
}

/// An engine over a [`Resident`] (`None`: a local engine without one,
/// reporting only the memory it holds). It generates nothing: these tests
/// are about its residence.
struct LocalEngine(Option<Arc<Resident>>);

#[async_trait::async_trait]
impl svc_core::Generator for LocalEngine {
    async fn generate(&self, _: GenerateRequest) -> Result<EventStream, EngineError> {
        Err(EngineError::Unavailable("not a generating model".into()))
    }

    async fn count_tokens(&self, request: &GenerateRequest) -> Result<u64, EngineError> {
        Ok(svc_core::estimate_tokens(request))
    }

    fn sees_images(&self) -> bool {
        false
    }
}

impl Engine for LocalEngine {
    svc_core::offers!(generator);

    fn name(&self) -> &str {
        "resident"
    }

    fn status(&self) -> EngineStatus {
        match &self.0 {
            Some(resident) => {
                let residency = resident.residency();
                EngineStatus {
                    memory_bytes: Some(residency.memory_bytes),
                    residency: Some(residency),
                    ..EngineStatus::default()
                }
            }
            None => EngineStatus {
                memory_bytes: Some(1234),
                ..EngineStatus::default()
            },
        }
    }

    fn residence(&self) -> Option<&dyn Residence> {
        self.0.as_deref().map(|r| r as &dyn Residence)
    }
}

/// The fake models (none with a residence, like upstreams) and these:
/// `local/tiny-q4` (unloaded, kept 5 minutes once idle), `local-pinned`
/// (loaded, pinned, evicted twice before), `local-broken` (every load
/// fails), and `local-plain` (a local engine without a residence that
/// reports its memory).
struct Models {
    tiny: Arc<Resident>,
    pinned: Arc<Resident>,
    broken: Arc<Resident>,
}

async fn app(db: Database) -> (TestApp, Models) {
    let probe = Arc::new(Probe::default());
    let mut routes: Vec<ModelRoute> = fake_models(probe.clone()).iter().cloned().collect();
    let tiny = Resident::new(Residency {
        keep_alive: Some(Duration::from_secs(300)),
        ..Residency::default()
    });
    let pinned = Resident::new(Residency {
        state: ResidencyState::Loaded,
        memory_bytes: PINNED_MEMORY,
        keep_alive: None,
        loads: 1,
        load_seconds: 1.5,
        evictions: 2,
        ..Residency::default()
    });
    let broken = Resident::new(Residency {
        keep_alive: Some(Duration::from_secs(60)),
        ..Residency::default()
    });
    broken.fail.store(true, Ordering::SeqCst);
    let route = |id: &str, resident: Option<&Arc<Resident>>| ModelRoute {
        id: id.into(),
        engine: Arc::new(LocalEngine(resident.cloned())),
        reasoning: false,
        created: 1_700_000_000,
        owned_by: "svc".into(),
        default_system_prompt: None,
        fallbacks: Fallbacks::default(),
    };
    routes.extend([
        route("local/tiny-q4", Some(&tiny)),
        route("local-pinned", Some(&pinned)),
        route("local-broken", Some(&broken)),
        route("local-plain", None),
    ]);
    let app = TestApp::spawn_models(
        db,
        ServerConfig::default(),
        ModelRegistry::new(routes),
        probe,
    )
    .await;
    (
        app,
        Models {
            tiny,
            pinned,
            broken,
        },
    )
}

async fn get(app: &TestApp, key: &str, path: &str) -> Value {
    let response = app
        .client
        .get(app.url(path))
        .bearer_auth(key)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "GET {path}");
    response.json().await.unwrap()
}

async fn post(app: &TestApp, key: &str, path: &str, body: Value) -> reqwest::Response {
    app.client
        .post(app.url(path))
        .bearer_auth(key)
        .json(&body)
        .send()
        .await
        .unwrap()
}

const LOAD: &str = "/v1/admin/models/load";
const UNLOAD: &str = "/v1/admin/models/unload";

#[tokio::test]
async fn the_list_shows_each_local_models_residency_and_none_for_the_others() {
    let (app, _) = app(Database::Sqlite).await;
    let key = app.create_key().await;
    let list = get(&app, &key, "/v1/models").await;
    let of = |id: &str| {
        list["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["id"] == id)
            .unwrap_or_else(|| panic!("{id} is not listed: {list}"))
            .clone()
    };
    assert_eq!(
        of("local/tiny-q4"),
        json!({"id": "local/tiny-q4", "object": "model", "created": 1_700_000_000,
            "owned_by": "svc", "residency": {"state": "unloaded", "memory_bytes": 0,
            "pinned": false, "keep_alive_seconds": 300}})
    );
    // Pinned: no keep-alive.
    assert_eq!(
        of("local-pinned")["residency"],
        json!({"state": "loaded", "memory_bytes": PINNED_MEMORY, "pinned": true})
    );
    // A model without a residence (an upstream's, the fakes): as OpenAI's.
    for id in ["svc", "local-plain"] {
        let model = of(id);
        assert!(model.get("residency").is_none(), "{model}");
        assert_eq!(model.as_object().unwrap().len(), 4, "{model}");
    }

    // One model, by an id with a `/`.
    let one = get(&app, &key, "/v1/models/local/tiny-q4").await;
    assert_eq!(one["residency"]["state"], "unloaded");
    let upstream = get(&app, &key, "/v1/models/svc").await;
    assert!(upstream.get("residency").is_none(), "{upstream}");
}

/// An account of `email` who owns the project `project`, with an admin key
/// there made to reach `reach`.
async fn owners_admin_key(
    app: &TestApp,
    email: &str,
    admin: bool,
    project: &ProjectId,
    reach: AdminReach,
) -> String {
    let user = app.create_user(email, "password123", admin).await;
    app.store
        .set_project_member(project, &user.id, ProjectRole::Owner, 1)
        .await
        .unwrap();
    app.create_scoped_key(
        Some(&user.id),
        KeyScope {
            project_id: Some(project.clone()),
            kind: KeyKind::Admin(reach),
            ..KeyScope::default()
        },
    )
    .await
}

/// The entries of the audit log of `kind`, newest first, as the admin API
/// lists them filtered by their type (a type the filter did not know was
/// refused with 400).
async fn audited(app: &TestApp, admin: &str, kind: &str) -> Vec<Value> {
    let url = format!("/v1/organization/audit_logs?limit=100&event_types[]={kind}");
    let list = get(app, admin, &url).await;
    list["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == kind)
        .cloned()
        .collect()
}

async fn organization_admins_load_and_unload_through_the_admin_api(db: Database) {
    let (app, models) = app(db).await;
    let admin = app.create_admin_key().await;
    let tiny = json!({"model": "local/tiny-q4"});

    // Loaded: the model as the list shows it, now loaded.
    let loaded = post(&app, &admin, LOAD, tiny.clone()).await;
    assert_eq!(loaded.status(), 200);
    let loaded: Value = loaded.json().await.unwrap();
    assert_eq!(
        loaded,
        json!({"id": "local/tiny-q4", "object": "model", "created": 1_700_000_000,
            "owned_by": "svc", "residency": {"state": "loaded", "memory_bytes": MEMORY,
            "pinned": false, "keep_alive_seconds": 300}})
    );
    assert_eq!(models.tiny.state(), ResidencyState::Loaded);

    // Unloaded, then not loaded; in use, unloaded when idle.
    let unloaded: Value = post(&app, &admin, UNLOAD, tiny.clone())
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(unloaded["unload"], "unloaded", "{unloaded}");
    assert_eq!(unloaded["id"], "local/tiny-q4");
    assert_eq!(unloaded["residency"]["state"], "unloaded");
    assert_eq!(unloaded["residency"]["memory_bytes"], 0);
    let again = post(&app, &admin, UNLOAD, tiny.clone()).await;
    assert_eq!(again.status(), 200);
    let again: Value = again.json().await.unwrap();
    assert_eq!(again["unload"], "not_loaded");
    assert_eq!(post(&app, &admin, LOAD, tiny.clone()).await.status(), 200);
    models.tiny.busy.store(true, Ordering::SeqCst);
    let later: Value = post(&app, &admin, UNLOAD, tiny.clone())
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(later["unload"], "when_idle");
    assert_eq!(later["residency"]["state"], "loaded");
    assert!(!models.tiny.ended.load(Ordering::SeqCst));
    // Forced: unloaded now, its running requests ended.
    let forced = json!({"model": "local/tiny-q4", "force": true});
    let forced: Value = post(&app, &admin, UNLOAD, forced)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(forced["unload"], "unloaded", "{forced}");
    assert_eq!(forced["residency"]["state"], "unloaded");
    assert!(models.tiny.ended.load(Ordering::SeqCst));
    // A pinned model is unloaded when asked too.
    let pinned: Value = post(&app, &admin, UNLOAD, json!({"model": "local-pinned"}))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(pinned["unload"], "unloaded");
    assert_eq!(models.pinned.state(), ResidencyState::Unloaded);

    // Each audited, by the key, naming the model (and what the unload did).
    let loads = audited(&app, &admin, "model.loaded").await;
    assert_eq!(loads.len(), 2, "{loads:?}");
    assert_eq!(loads[0]["model.loaded"], json!({"id": "local/tiny-q4"}));
    assert_eq!(loads[0]["actor"]["type"], "api_key");
    assert_eq!(loads[0]["actor"]["api_key"]["type"], "operator");
    assert!(loads[0].get("project").is_none(), "{:?}", loads[0]);
    let unloads = audited(&app, &admin, "model.unloaded").await;
    let said: Vec<(&str, &str)> = unloads
        .iter()
        .map(|e| {
            (
                e["model.unloaded"]["id"].as_str().unwrap(),
                e["model.unloaded"]["unload"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        said,
        [
            ("local-pinned", "unloaded"),
            ("local/tiny-q4", "unloaded"),
            ("local/tiny-q4", "when_idle"),
            ("local/tiny-q4", "not_loaded"),
            ("local/tiny-q4", "unloaded"),
        ]
    );
    // Only the forced one says it was.
    let forced: Vec<bool> = unloads
        .iter()
        .map(|e| e["model.unloaded"]["force"] == true)
        .collect();
    assert_eq!(forced, [false, true, false, false, false]);

    // An organization owner's own admin key, made in another project, may.
    let team = app.create_project("Team", ModelAccess::any()).await;
    let owners = owners_admin_key(
        &app,
        "olga@example.com",
        true,
        &team.id,
        AdminReach::Organization,
    )
    .await;
    assert_eq!(post(&app, &owners, LOAD, tiny.clone()).await.status(), 200);
    let by_olga = &audited(&app, &admin, "model.loaded").await[0];
    assert_eq!(
        by_olga["actor"]["api_key"]["user"]["email"],
        "olga@example.com"
    );

    // A project owner's admin key may not, whatever it was made to reach;
    // nor may a key that is not an admin key, nor no key.
    let before = models.tiny.residency();
    for (email, reach) in [
        ("rita@example.com", AdminReach::Project),
        ("ron@example.com", AdminReach::Organization),
    ] {
        let ritas = owners_admin_key(&app, email, false, &team.id, reach).await;
        for path in [LOAD, UNLOAD] {
            let refused = post(&app, &ritas, path, tiny.clone()).await;
            let message = expect_error(
                refused,
                403,
                "invalid_request_error",
                "insufficient_permissions",
                None,
            )
            .await;
            assert!(message.contains("organization owner"), "{message}");
        }
    }
    let plain = app.create_key().await;
    for path in [LOAD, UNLOAD] {
        let refused = post(&app, &plain, path, tiny.clone()).await;
        let message = expect_error(
            refused,
            403,
            "invalid_request_error",
            "insufficient_permissions",
            None,
        )
        .await;
        assert!(message.contains("api.management.write"), "{message}");
        let anonymous = app.client.post(app.url(path)).json(&tiny).send().await;
        expect_error(
            anonymous.unwrap(),
            401,
            "invalid_request_error",
            "invalid_api_key",
            None,
        )
        .await;
    }
    assert_eq!(models.tiny.residency(), before, "nothing changed");

    // A model that does not exist; one served by an upstream; bad bodies.
    for path in [LOAD, UNLOAD] {
        let missing = post(&app, &admin, path, json!({"model": "no/such-model"})).await;
        let message = expect_error(
            missing,
            404,
            "invalid_request_error",
            "model_not_found",
            Some("model"),
        )
        .await;
        assert!(message.contains("no/such-model"), "{message}");
        for upstream in ["svc", "local-plain"] {
            let refused = post(&app, &admin, path, json!({ "model": upstream })).await;
            let message = expect_error(
                refused,
                400,
                "invalid_request_error",
                "invalid_value",
                Some("model"),
            )
            .await;
            assert!(message.contains("upstream"), "{message}");
        }
        // `force` is the unload's alone.
        let force = match path {
            LOAD => (json!({"model": "svc", "force": true}), None),
            _ => (json!({"model": "svc", "force": "yes"}), Some("force")),
        };
        for (body, param) in [
            (json!({}), Some("model")),
            (json!({"model": 3}), Some("model")),
            force,
            (json!({"model": "svc", "now": true}), None),
            (json!(["svc"]), None),
        ] {
            let refused = post(&app, &admin, path, body.clone()).await;
            let status = refused.status();
            let error: Value = refused.json().await.unwrap();
            assert_eq!(status, 400, "{body}: {error}");
            assert_eq!(error["error"]["code"], "invalid_json", "{body}: {error}");
            if let Some(param) = param {
                assert_eq!(error["error"]["param"], param, "{body}: {error}");
            }
        }
    }

    // A load that fails: 503 with Retry-After, as chat's; not audited.
    let failed = post(&app, &admin, LOAD, json!({"model": "local-broken"})).await;
    assert_eq!(failed.headers()["retry-after"], "1");
    let message = expect_error(failed, 503, "server_error", "model_unavailable", None).await;
    assert!(message.contains("memory budget"), "{message}");
    assert_eq!(models.broken.residency().load_failures, 1);
    let loads = audited(&app, &admin, "model.loaded").await;
    assert!(
        loads
            .iter()
            .all(|e| e["model.loaded"]["id"] != "local-broken"),
        "{loads:?}"
    );
}

#[tokio::test]
async fn metrics_show_each_local_models_residency_by_id() {
    let (app, _models) = app(Database::Sqlite).await;
    let admin = app.create_admin_key().await;
    let tiny = json!({"model": "local/tiny-q4"});
    assert_eq!(post(&app, &admin, LOAD, tiny.clone()).await.status(), 200);
    assert_eq!(post(&app, &admin, UNLOAD, tiny.clone()).await.status(), 200);
    assert_eq!(post(&app, &admin, LOAD, tiny).await.status(), 200);
    let failed = post(&app, &admin, LOAD, json!({"model": "local-broken"})).await;
    assert_eq!(failed.status(), 503);

    let metrics = app.metrics().await;
    for line in [
        "# TYPE svc_model_loaded gauge",
        "svc_model_loaded{model=\"local/tiny-q4\"} 1",
        "svc_model_loaded{model=\"local-pinned\"} 1",
        "svc_model_loaded{model=\"local-broken\"} 0",
        "# TYPE svc_model_memory_bytes gauge",
        &format!("svc_model_memory_bytes{{model=\"local/tiny-q4\"}} {MEMORY}"),
        &format!("svc_model_memory_bytes{{model=\"local-pinned\"}} {PINNED_MEMORY}"),
        "svc_model_memory_bytes{model=\"local-broken\"} 0",
        // A local engine without a residence: its memory only.
        "svc_model_memory_bytes{model=\"local-plain\"} 1234",
        "# TYPE svc_model_loads_total counter",
        "svc_model_loads_total{model=\"local/tiny-q4\"} 2",
        "svc_model_loads_total{model=\"local-pinned\"} 1",
        "# TYPE svc_model_load_failures_total counter",
        "svc_model_load_failures_total{model=\"local-broken\"} 1",
        "svc_model_load_failures_total{model=\"local/tiny-q4\"} 0",
        "# TYPE svc_model_load_seconds_total counter",
        "svc_model_load_seconds_total{model=\"local/tiny-q4\"} 0.5",
        "svc_model_load_seconds_total{model=\"local-pinned\"} 1.5",
        "# TYPE svc_model_evictions_total counter",
        "svc_model_evictions_total{model=\"local-pinned\"} 2",
        "svc_model_evictions_total{model=\"local/tiny-q4\"} 0",
        "# TYPE svc_model_unloads_total counter",
        "svc_model_unloads_total{model=\"local/tiny-q4\"} 1",
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "no line {line:?} in:\n{metrics}"
        );
    }
    for name in [
        "svc_model_loaded",
        "svc_model_memory_bytes",
        "svc_model_loads_total",
        "svc_model_load_failures_total",
        "svc_model_load_seconds_total",
        "svc_model_evictions_total",
        "svc_model_unloads_total",
    ] {
        let help = format!("# HELP {name} ");
        let helps: Vec<_> = metrics.lines().filter(|l| l.starts_with(&help)).collect();
        assert_eq!(helps.len(), 1, "{name}: {helps:?}");
        assert!(helps[0].contains("model id"), "{}", helps[0]);
    }
    // Models without a residence have no residency series.
    for series in [
        "svc_model_loaded{model=\"local-plain\"}",
        "svc_model_loaded{model=\"svc\"}",
        "svc_model_memory_bytes{model=\"svc\"}",
        "svc_model_loads_total{model=\"local-plain\"}",
    ] {
        assert!(!metrics.contains(series), "{series} in:\n{metrics}");
    }
}

#[tokio::test]
async fn a_gateway_without_local_models_has_no_model_series() {
    let app = TestApp::spawn().await;
    let metrics = app.metrics().await;
    assert!(!metrics.contains("svc_model_"), "{metrics}");
}

#[tokio::test]
async fn the_dashboard_shows_the_models_and_lets_organization_owners_load_them() {
    let (app, models) = app(Database::Sqlite).await;
    let (ada, ada_user) = app.signed_in("ada@example.com", true).await;
    let (bob, bob_user) = app.signed_in("bob@example.com", false).await;

    // An organization owner: every model, its state, memory and keep-alive,
    // and the buttons; the nav links the page.
    let page = ada.get("/dashboard/models").await;
    assert_eq!(page.status, 200, "{}", page.body);
    for text in [
        "href=\"/dashboard/models\" aria-current=\"page\"",
        "local&#x2f;tiny-q4",
        "<span class=\"state unloaded\">unloaded</span>",
        "<span class=\"state loaded\">loaded</span>",
        "3.0 GiB",
        "5 min",
        "forever (never unloaded to make room)",
        "served by an upstream",
        "action=\"/dashboard/models/load\"",
        "action=\"/dashboard/models/unload\"",
        "aria-label=\"Load local&#x2f;tiny-q4\"",
    ] {
        assert!(page.body.contains(text), "no {text:?} in {}", page.body);
    }
    // Not for a model served by an upstream.
    assert!(!page.body.contains("aria-label=\"Load svc\""));
    // The nav links it on every page.
    assert!(
        ada.get("/dashboard/keys")
            .await
            .body
            .contains("href=\"/dashboard/models\"")
    );

    // Anyone else: the models they may use, and no button.
    let page = bob.get("/dashboard/models").await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("local&#x2f;tiny-q4") && page.body.contains("<code>svc</code>"));
    assert!(
        !page.body.contains("/dashboard/models/load"),
        "{}",
        page.body
    );
    assert!(!page.body.contains("/dashboard/models/unload"));
    // Only what the default project allows, and what their keys may use.
    let mut default = app
        .store
        .project_by_id(&ProjectId::default_project())
        .await
        .unwrap()
        .unwrap();
    default.allowed_models = ModelAccess(Some(vec!["local/*".into()]));
    assert!(app.store.update_project(&default).await.unwrap());
    let page = bob.get("/dashboard/models").await;
    assert!(page.body.contains("local&#x2f;tiny-q4"), "{}", page.body);
    assert!(!page.body.contains("local-pinned") && !page.body.contains("<code>svc</code>"));
    let team = app
        .create_project("Team", ModelAccess(Some(vec!["local-pinned".into()])))
        .await;
    app.create_scoped_key(
        Some(&bob_user.id),
        KeyScope {
            project_id: Some(team.id.clone()),
            ..KeyScope::default()
        },
    )
    .await;
    let page = bob.get("/dashboard/models").await;
    assert!(page.body.contains("local-pinned"), "{}", page.body);
    assert!(!page.body.contains("<code>svc</code>"));
    // The organization owner still sees them all.
    assert!(
        ada.get("/dashboard/models")
            .await
            .body
            .contains("<code>svc</code>")
    );

    // Their POSTs do not exist for anyone else.
    let bobs_csrf = bob.get("/dashboard/models").await.csrf();
    for path in ["/dashboard/models/load", "/dashboard/models/unload"] {
        let refused = bob
            .post(path, &[("csrf", &bobs_csrf), ("model", "local/tiny-q4")])
            .await;
        assert_eq!(refused.status, 404, "{path}: {}", refused.body);
    }
    assert_eq!(models.tiny.state(), ResidencyState::Unloaded);

    // Without the session's CSRF token: refused, nothing done.
    for csrf in ["", "0000", bobs_csrf.as_str()] {
        let refused = ada
            .post(
                "/dashboard/models/load",
                &[("csrf", csrf), ("model", "local/tiny-q4")],
            )
            .await;
        assert_eq!(refused.status, 403, "{}", refused.body);
    }
    let no_field = ada
        .post("/dashboard/models/load", &[("model", "local/tiny-q4")])
        .await;
    assert!(no_field.status.is_client_error(), "{}", no_field.body);
    assert_eq!(models.tiny.state(), ResidencyState::Unloaded);

    // Load and Unload, audited as the admin API's, by the session.
    let csrf = ada.get("/dashboard/models").await.csrf();
    let done = ada
        .post(
            "/dashboard/models/load",
            &[("csrf", &csrf), ("model", "local/tiny-q4")],
        )
        .await;
    assert_eq!(done.status, 303, "{}", done.body);
    assert_eq!(
        done.location.as_deref(),
        Some("/dashboard/models?done=loaded&model=local%2Ftiny-q4")
    );
    let page = ada.follow(done).await;
    assert!(
        page.body.contains("local&#x2f;tiny-q4 is loaded."),
        "{}",
        page.body
    );
    assert_eq!(models.tiny.state(), ResidencyState::Loaded);
    assert!(page.body.contains("300.0 MiB"), "{}", page.body);
    let done = ada
        .post(
            "/dashboard/models/unload",
            &[("csrf", &csrf), ("model", "local/tiny-q4")],
        )
        .await;
    assert_eq!(
        done.location.as_deref(),
        Some("/dashboard/models?done=unloaded&model=local%2Ftiny-q4")
    );
    assert_eq!(models.tiny.state(), ResidencyState::Unloaded);
    let admin = app.create_admin_key().await;
    for kind in ["model.loaded", "model.unloaded"] {
        let entries = audited(&app, &admin, kind).await;
        assert_eq!(entries.len(), 1, "{kind}: {entries:?}");
        assert_eq!(entries[0][kind]["id"], "local/tiny-q4");
        assert_eq!(entries[0]["actor"]["type"], "session");
        assert_eq!(
            entries[0]["actor"]["session"]["user"]["id"],
            ada_user.id.0.as_str()
        );
    }

    // Refusals are the page again, with why and the status.
    for (model, status, why) in [
        ("local-broken", 503, "memory budget"),
        ("svc", 400, "served by an upstream and is not loaded here"),
        ("no-such-model", 404, "does not exist"),
    ] {
        let refused = ada
            .post(
                "/dashboard/models/load",
                &[("csrf", &csrf), ("model", model)],
            )
            .await;
        assert_eq!(refused.status, status, "{model}: {}", refused.body);
        assert!(refused.body.contains(why), "{model}: {}", refused.body);
        assert!(refused.body.contains("id=\"models-error\""));
    }
}
