//! Projects, memberships, key kinds, model and MCP server lists, on both
//! backends; and the upgrade of a database made before projects existed.

#![expect(
    clippy::unwrap_used,
    clippy::panic,
    clippy::disallowed_methods,
    reason = "test code: a failed check fails the test, output goes to its log, and its tasks end with it"
)]

mod common;

use std::sync::Arc;

use common::{Db, join_all, new_key, new_user};
use sqlx::{AnyConnection, Connection};
use svc_core::ids::ProjectId;
use svc_core::key::KeyOrigin;
use svc_core::keys::{KeyScope, KeyService, NewKey};
use svc_core::project::{
    AdminReach, KeyKind, McpServerAccess, MemberRemoval, ModelAccess, Permission, ProjectRecord,
    ProjectRole,
};
use svc_core::store::{KeyStore, ProjectStore, ResponseStore, StoreError, UserStore};

on_both_backends!(
    a_database_from_before_projects_upgrades_with_everything_in_the_default_project,
    projects_and_memberships_are_stored,
    keys_keep_their_project_kind_and_models,
    a_stored_value_no_kind_reads_is_an_error,
    changing_a_projects_models_is_a_key_change_on_every_store,
    members_are_removed_but_never_the_last_owner,
    concurrent_removals_of_two_owners_leave_one,
    a_keys_models_change_and_every_store_sees_it,
    admin_keys_from_before_0013_reach_what_their_making_allows,
    mcp_server_lists_are_stored_and_judge_keys_on_every_store,
);

async fn a_database_from_before_projects_upgrades_with_everything_in_the_default_project(db: &Db) {
    // The schema as svc left it before projects, with an admin, a member,
    // their keys, an operator key and a stored response.
    let url = match db {
        Db::Sqlite { url, .. } => format!("{url}?mode=rwc"),
        Db::Postgres(schema) => schema.url().to_owned(),
    };
    let mut conn = db.migrated_before(8).await;
    let admin = "usr_00000000000000a1";
    let member = "usr_00000000000000b2";
    let statements = [
        format!(
            "INSERT INTO users (id, email, password_hash, is_admin, created_at) \
             VALUES ('{admin}', 'admin@example.com', 'x', 1, 100)"
        ),
        format!(
            "INSERT INTO users (id, email, password_hash, is_admin, created_at, disabled_at) \
             VALUES ('{member}', 'member@example.com', 'x', 0, 200, NULL)"
        ),
        "INSERT INTO responses (id, owner, created_at, expires_at, response, conversation) \
         VALUES ('resp_old', 'operator', 1, 9999999999, '{}', '[]')"
            .to_owned(),
    ];
    for sql in &statements {
        sqlx::query(sql).execute(&mut conn).await.unwrap();
    }
    conn.close().await.unwrap();
    // Keys written as the old svc wrote them: through the old columns only.
    let mut keys = Vec::new();
    for (n, owner) in [Some(admin), Some(member), None].into_iter().enumerate() {
        let (record, hash) = new_key(owner, 300 + n as i64);
        let mut conn = AnyConnection::connect(&url).await.unwrap();
        sqlx::query(
            "INSERT INTO api_keys (id, key_hash, name, hint, owner_id, created_via, created_at, \
             rpm_limit) VALUES ($1, $2, $3, $4, $5, 'cli', $6, 7)",
        )
        .bind(record.id.0.as_str())
        .bind(hash.to_hex())
        .bind(record.name.as_str())
        .bind(record.hint.as_str())
        .bind(owner)
        .bind(record.created_at)
        .execute(&mut conn)
        .await
        .unwrap();
        conn.close().await.unwrap();
        keys.push((record, hash));
    }

    // Opening it with this svc applies the migration.
    let store = db.store().await;
    let default = ProjectId::default_project();
    let project = store.project_by_id(&default).await.unwrap().unwrap();
    assert_eq!(project.name, "Default project");
    assert_eq!(project.allowed_models, ModelAccess::any());
    assert_eq!(project.allowed_mcp_servers, McpServerAccess::any());
    assert_eq!(store.list_projects().await.unwrap(), vec![project]);
    for (record, hash) in &keys {
        let read = store.key_by_hash(hash).await.unwrap().unwrap();
        assert_eq!(read.id, record.id);
        assert_eq!(read.owner_id, record.owner_id);
        assert_eq!(read.project_id, default);
        assert_eq!(read.kind, KeyKind::All);
        assert_eq!(read.allowed_models, ModelAccess::any());
        assert_eq!(read.limits.requests_per_minute, Some(7));
        assert!(read.may_use("svc"));
        assert_eq!(read.allowed_mcp_servers, McpServerAccess::any());
        assert!(
            read.may_use_mcp_server("github"),
            "keys from before use every server"
        );
    }
    let in_project = store.list_project_keys(&default).await.unwrap();
    assert_eq!(in_project.len(), 3);
    assert_eq!(store.list_keys(None).await.unwrap(), in_project);
    let role = |id: &str| {
        let store = store.clone();
        let default = default.clone();
        let id = svc_core::ids::UserId(id.to_owned());
        async move { store.project_role(&default, &id).await.unwrap() }
    };
    assert_eq!(role(admin).await, Some(ProjectRole::Owner));
    assert_eq!(role(member).await, Some(ProjectRole::Member));
    assert_eq!(
        store
            .user_by_email("member@example.com")
            .await
            .unwrap()
            .unwrap()
            .created_at,
        200
    );
    assert!(
        store
            .response_by_id("resp_old", "operator", 1)
            .await
            .unwrap()
            .is_some()
    );

    // And everything works as before: the keys authenticate, new keys go
    // to the default project, a second start changes nothing.
    let service = KeyService::new(Arc::new(store.clone()));
    let presented = keys_secret_free_check(&service).await;
    assert_eq!(presented.project_id, default);
    drop(store);
    let again = db.store().await;
    assert_eq!(again.list_project_keys(&default).await.unwrap().len(), 4);
    assert_eq!(again.list_projects().await.unwrap().len(), 1);
}

/// A key made through the service after the upgrade authenticates.
async fn keys_secret_free_check(service: &KeyService) -> svc_core::key::KeyRecord {
    let (key, _) = service
        .create(
            NewKey {
                name: "after".into(),
                owner_id: None,
                created_via: KeyOrigin::Cli,
                expires_in: None,
                scope: KeyScope::default(),
            },
            &svc_core::Actor::Operator,
        )
        .await
        .unwrap();
    service
        .authenticate(Some(&format!("Bearer {}", key.expose())))
        .await
        .unwrap()
}

fn project(name: &str, created_at: i64, models: ModelAccess) -> ProjectRecord {
    ProjectRecord {
        id: ProjectId::generate(),
        name: name.into(),
        created_at,
        archived_at: None,
        allowed_models: models,
        allowed_mcp_servers: McpServerAccess::any(),
        budget: None,
    }
}

async fn projects_and_memberships_are_stored(db: &Db) {
    let store = db.store().await;
    let a = project("A", 10, ModelAccess::any());
    let b = project(
        "B",
        20,
        ModelAccess::only(vec!["svc*".into(), "x".into()]).unwrap(),
    );
    store.insert_project(&a).await.unwrap();
    store.insert_project(&b).await.unwrap();
    assert!(matches!(
        store.insert_project(&a).await,
        Err(StoreError::Conflict)
    ));
    assert_eq!(store.project_by_id(&b.id).await.unwrap(), Some(b.clone()));
    assert_eq!(
        store.project_by_id(&ProjectId::generate()).await.unwrap(),
        None
    );
    let ids: Vec<_> = store
        .list_projects()
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.id)
        .collect();
    assert_eq!(ids.len(), 3);
    assert!(ids.contains(&ProjectId::default_project()));
    // Oldest first (the default project was made when the database was).
    assert_eq!(&ids[..2], &[a.id.clone(), b.id.clone()]);

    // New accounts join the default project: admins as owners.
    let mut admin = new_user("admin@example.com", 5);
    admin.is_admin = true;
    let member = new_user("member@example.com", 6);
    store.insert_user(&admin).await.unwrap();
    store.insert_user(&member).await.unwrap();
    let default = ProjectId::default_project();
    assert_eq!(
        store.project_role(&default, &admin.id).await.unwrap(),
        Some(ProjectRole::Owner)
    );
    assert_eq!(
        store.project_role(&default, &member.id).await.unwrap(),
        Some(ProjectRole::Member)
    );
    assert_eq!(store.project_role(&a.id, &member.id).await.unwrap(), None);
    store
        .set_project_member(&a.id, &member.id, ProjectRole::Member, 30)
        .await
        .unwrap();
    store
        .set_project_member(&a.id, &member.id, ProjectRole::Owner, 31)
        .await
        .unwrap();
    assert_eq!(
        store.project_role(&a.id, &member.id).await.unwrap(),
        Some(ProjectRole::Owner)
    );
    let members = store.list_project_members(&a.id).await.unwrap();
    assert_eq!(members.len(), 1);
    assert_eq!(members[0].user_id, member.id);
    assert_eq!(members[0].email, "member@example.com");
    assert_eq!(members[0].role, ProjectRole::Owner);
    assert_eq!(members[0].added_at, 30, "joining is kept; the role changed");
    let everyone = store.list_project_members(&default).await.unwrap();
    assert_eq!(
        everyone.iter().map(|m| m.role).collect::<Vec<_>>(),
        [ProjectRole::Owner, ProjectRole::Member]
    );
    // A taken email still conflicts, and leaves no membership behind.
    let mut twin = new_user("member@example.com", 7);
    twin.is_admin = true;
    assert!(matches!(
        store.insert_user(&twin).await,
        Err(StoreError::Conflict)
    ));
    assert_eq!(store.project_role(&default, &twin.id).await.unwrap(), None);
    // Deleting an account removes its memberships.
    assert_eq!(
        store.delete_user(&member.id, 40).await.unwrap(),
        svc_core::user::AccountChange::Done
    );
    assert_eq!(store.project_role(&a.id, &member.id).await.unwrap(), None);
}

async fn keys_keep_their_project_kind_and_models(db: &Db) {
    let store = db.store().await;
    let limited = project(
        "limited",
        10,
        ModelAccess::only(vec!["svc*".into()]).unwrap(),
    );
    store.insert_project(&limited).await.unwrap();
    let (mut restricted, restricted_hash) = new_key(None, 1);
    restricted.project_id = limited.id.clone();
    restricted.kind = KeyKind::Restricted(vec![Permission::ModelRequest, Permission::ModelRead]);
    restricted.allowed_models = ModelAccess::only(vec!["svc".into()]).unwrap();
    let (mut admin, admin_hash) = new_key(None, 2);
    admin.project_id = limited.id.clone();
    admin.kind = KeyKind::Admin(svc_core::AdminReach::Organization);
    let (mut none, none_hash) = new_key(None, 3);
    none.kind = KeyKind::Restricted(vec![]);
    none.allowed_models = ModelAccess::only(vec![]).unwrap();
    for (record, hash) in [
        (&restricted, &restricted_hash),
        (&admin, &admin_hash),
        (&none, &none_hash),
    ] {
        store.insert_key(record, hash).await.unwrap();
    }

    let read = store.key_by_hash(&restricted_hash).await.unwrap().unwrap();
    assert_eq!(read.kind, restricted.kind);
    assert_eq!(read.project_id, limited.id);
    assert_eq!(read.allowed_models, restricted.allowed_models);
    assert_eq!(read.project_allowed_models, limited.allowed_models);
    assert!(read.may_use("svc"));
    assert!(!read.may_use("svc-thinking"), "the key's own list");
    let admin_read = store.key_by_id(&admin.id).await.unwrap().unwrap();
    assert_eq!(
        admin_read.kind,
        KeyKind::Admin(svc_core::AdminReach::Organization)
    );
    assert!(admin_read.may_use("svc-thinking"));
    assert!(!admin_read.may_use("other"), "the project's list");
    let none_read = store.key_by_hash(&none_hash).await.unwrap().unwrap();
    assert_eq!(none_read.kind, KeyKind::Restricted(vec![]));
    assert!(!none_read.may_use("svc"));
    assert_eq!(none_read.project_id, ProjectId::default_project());

    let of_limited: Vec<_> = store
        .list_project_keys(&limited.id)
        .await
        .unwrap()
        .into_iter()
        .map(|k| k.id)
        .collect();
    assert_eq!(of_limited, vec![admin.id.clone(), restricted.id.clone()]);
    let of_default = store
        .list_project_keys(&ProjectId::default_project())
        .await
        .unwrap();
    assert_eq!(of_default.len(), 1);
    assert!(
        store
            .list_project_keys(&ProjectId::generate())
            .await
            .unwrap()
            .is_empty()
    );
}

async fn a_stored_value_no_kind_reads_is_an_error(db: &Db) {
    let store = db.store().await;
    let (record, hash) = new_key(None, 1);
    store.insert_key(&record, &hash).await.unwrap();
    db.execute(&format!(
        "UPDATE api_keys SET kind = 'root' WHERE id = '{}'",
        record.id.0
    ))
    .await;
    let err = store.key_by_hash(&hash).await.unwrap_err();
    assert!(err.to_string().contains("kind"), "{err}");
    db.execute(&format!(
        "UPDATE api_keys SET kind = 'restricted', permissions = 'not json' WHERE id = '{}'",
        record.id.0
    ))
    .await;
    let err = store.key_by_hash(&hash).await.unwrap_err();
    assert!(err.to_string().contains("permissions"), "{err}");
}

async fn changing_a_projects_models_is_a_key_change_on_every_store(db: &Db) {
    let store = db.store().await;
    let replica = db.store().await;
    let limited = project("limited", 10, ModelAccess::any());
    store.insert_project(&limited).await.unwrap();
    let (mut record, hash) = new_key(None, 1);
    record.project_id = limited.id.clone();
    store.insert_key(&record, &hash).await.unwrap();
    let before = replica.keys_version();
    let only = ModelAccess::only(vec!["svc".into()]).unwrap();
    let budget = Some(svc_core::Budget::tokens(1000, svc_core::BudgetPeriod::Week));
    let changed = ProjectRecord {
        name: "renamed".into(),
        allowed_models: only.clone(),
        budget,
        ..limited.clone()
    };
    assert!(store.update_project(&changed).await.unwrap());
    let unknown = ProjectRecord {
        id: ProjectId::generate(),
        ..changed.clone()
    };
    assert!(!store.update_project(&unknown).await.unwrap());
    let read = store.project_by_id(&limited.id).await.unwrap().unwrap();
    assert_eq!(read, changed);
    // Keys are read with their project's models and budget.
    let key = replica.key_by_hash(&hash).await.unwrap().unwrap();
    assert_eq!(key.project_allowed_models, only);
    assert_eq!(key.project_budget, budget);
    // The other store (a replica, or another process on the SQLite file)
    // sees the change (PostgreSQL's notification may take a moment).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while replica.keys_version() == before {
        assert!(
            std::time::Instant::now() < deadline,
            "the replica never saw the change"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    // A spend budget reads back as one, on the project and on the key.
    let spend = Some(svc_core::Budget {
        limit: 2_500_000,
        unit: svc_core::BudgetUnit::Usd,
        period: svc_core::BudgetPeriod::Month,
    });
    let before = replica.keys_version();
    let changed = ProjectRecord {
        budget: spend,
        ..changed
    };
    assert!(store.update_project(&changed).await.unwrap());
    assert!(store.set_key_budget(&record.id, spend).await.unwrap());
    assert_eq!(
        store.project_by_id(&limited.id).await.unwrap().unwrap(),
        changed
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while replica.keys_version() == before {
        assert!(
            std::time::Instant::now() < deadline,
            "the replica never saw it"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let key = replica.key_by_hash(&hash).await.unwrap().unwrap();
    assert_eq!((key.budget, key.project_budget), (spend, spend));
}

async fn members_are_removed_but_never_the_last_owner(db: &Db) {
    let store = db.store().await;
    let team = project("team", 10, ModelAccess::any());
    store.insert_project(&team).await.unwrap();
    let owner = new_user("owner@example.com", 1);
    let member = new_user("member@example.com", 2);
    for user in [&owner, &member] {
        store.insert_user(user).await.unwrap();
    }
    store
        .set_project_member(&team.id, &owner.id, ProjectRole::Owner, 20)
        .await
        .unwrap();
    store
        .set_project_member(&team.id, &member.id, ProjectRole::Member, 21)
        .await
        .unwrap();
    // The member's key stays as it is.
    let (mut key, hash) = new_key(Some(&member.id.0), 22);
    key.project_id = team.id.clone();
    store.insert_key(&key, &hash).await.unwrap();

    assert_eq!(
        store
            .remove_project_member(&team.id, &member.id)
            .await
            .unwrap(),
        MemberRemoval::Removed(ProjectRole::Member)
    );
    assert_eq!(
        store.project_role(&team.id, &member.id).await.unwrap(),
        None
    );
    assert_eq!(
        store
            .remove_project_member(&team.id, &member.id)
            .await
            .unwrap(),
        MemberRemoval::NotMember
    );
    let kept = store.key_by_hash(&hash).await.unwrap().unwrap();
    assert_eq!(kept.revoked_at, None);
    assert_eq!(kept.project_id, team.id);
    // Other projects' memberships are untouched.
    assert_eq!(
        store
            .project_role(&ProjectId::default_project(), &member.id)
            .await
            .unwrap(),
        Some(ProjectRole::Member)
    );

    // The only owner stays; with a second owner, either may go.
    assert_eq!(
        store
            .remove_project_member(&team.id, &owner.id)
            .await
            .unwrap(),
        MemberRemoval::LastOwner
    );
    assert_eq!(
        store.project_role(&team.id, &owner.id).await.unwrap(),
        Some(ProjectRole::Owner)
    );
    store
        .set_project_member(&team.id, &member.id, ProjectRole::Owner, 30)
        .await
        .unwrap();
    assert_eq!(
        store
            .remove_project_member(&team.id, &owner.id)
            .await
            .unwrap(),
        MemberRemoval::Removed(ProjectRole::Owner)
    );
    let left = store.list_project_members(&team.id).await.unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].user_id, member.id);
    assert_eq!(
        store
            .remove_project_member(&ProjectId::generate(), &member.id)
            .await
            .unwrap(),
        MemberRemoval::NotMember
    );
}

async fn concurrent_removals_of_two_owners_leave_one(db: &Db) {
    let stores = [db.store().await, db.store().await];
    let team = project("team", 10, ModelAccess::any());
    stores[0].insert_project(&team).await.unwrap();
    let mut owners = Vec::new();
    for n in 0..2 {
        let user = new_user(&format!("owner{n}@example.com"), n);
        stores[0].insert_user(&user).await.unwrap();
        stores[0]
            .set_project_member(&team.id, &user.id, ProjectRole::Owner, 20)
            .await
            .unwrap();
        owners.push(user.id);
    }
    for _ in 0..5 {
        let results = join_all(2, |n| {
            let store = stores[n].clone();
            let project = team.id.clone();
            let owner = owners[n].clone();
            async move { store.remove_project_member(&project, &owner).await.unwrap() }
        })
        .await;
        let removed = results
            .iter()
            .filter(|r| **r == MemberRemoval::Removed(ProjectRole::Owner))
            .count();
        assert_eq!(removed, 1, "{results:?}");
        assert!(results.contains(&MemberRemoval::LastOwner), "{results:?}");
        let left = stores[0].list_project_members(&team.id).await.unwrap();
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].role, ProjectRole::Owner);
        // Both owners again for the next round.
        for owner in &owners {
            stores[0]
                .set_project_member(&team.id, owner, ProjectRole::Owner, 20)
                .await
                .unwrap();
        }
    }
}

async fn a_keys_models_change_and_every_store_sees_it(db: &Db) {
    let store = db.store().await;
    let replica = db.store().await;
    let (record, hash) = new_key(None, 1);
    store.insert_key(&record, &hash).await.unwrap();
    // PostgreSQL's listener starts in the background: until it has, the
    // version is `None`.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while replica.keys_version().is_none() {
        assert!(std::time::Instant::now() < deadline, "no keys version");
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let before = replica.keys_version();
    let only = ModelAccess::only(vec!["svc*".into()]).unwrap();
    assert!(store.set_key_models(&record.id, &only).await.unwrap());
    let read = replica.key_by_hash(&hash).await.unwrap().unwrap();
    assert_eq!(read.allowed_models, only);
    assert!(read.may_use("svc-thinking") && !read.may_use("other"));
    assert!(
        !store
            .set_key_models(&svc_core::ids::KeyId("key_missing".into()), &only)
            .await
            .unwrap()
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while replica.keys_version() == before {
        assert!(
            std::time::Instant::now() < deadline,
            "the replica never saw the change"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(
        store
            .set_key_models(&record.id, &ModelAccess::any())
            .await
            .unwrap()
    );
    assert_eq!(
        store
            .key_by_id(&record.id)
            .await
            .unwrap()
            .unwrap()
            .allowed_models,
        ModelAccess::any()
    );
}

/// Migration 0013 fixes each admin key's reach: the operator's and an
/// organization owner's reach the organization, except keys made through
/// the admin API (where anyone's admin key could make one for another
/// account: issue 29), which reach their project only, as does every key of
/// an account that is no organization owner. Other kinds have none.
async fn admin_keys_from_before_0013_reach_what_their_making_allows(db: &Db) {
    let mut conn = db.migrated_before(13).await;
    let (olga, rita) = ("usr_00000000000000a1", "usr_00000000000000b2");
    for (id, admin) in [(olga, 1), (rita, 0)] {
        sqlx::query(
            "INSERT INTO users (id, email, password_hash, is_admin, created_at) \
             VALUES ($1, $2, 'x', $3, 100)",
        )
        .bind(id)
        .bind(format!("{id}@example.com"))
        .bind(admin)
        .execute(&mut conn)
        .await
        .unwrap();
    }
    let cases = [
        (None, "cli", "admin", Some(AdminReach::Organization)),
        (Some(olga), "cli", "admin", Some(AdminReach::Organization)),
        (Some(olga), "api", "admin", Some(AdminReach::Project)),
        (Some(rita), "cli", "admin", Some(AdminReach::Project)),
        (Some(rita), "api", "admin", Some(AdminReach::Project)),
        (Some(olga), "dashboard", "all", None),
    ];
    let mut keys = Vec::new();
    for (n, (owner, via, kind, _)) in cases.iter().enumerate() {
        let (record, hash) = new_key(*owner, 300 + n as i64);
        sqlx::query(
            "INSERT INTO api_keys (id, key_hash, name, hint, owner_id, created_via, created_at, \
             project_id, kind) VALUES ($1, $2, $3, $4, $5, $6, $7, 'proj_default', $8)",
        )
        .bind(record.id.0.as_str())
        .bind(hash.to_hex())
        .bind(record.name.as_str())
        .bind(record.hint.as_str())
        .bind(*owner)
        .bind(*via)
        .bind(record.created_at)
        .bind(*kind)
        .execute(&mut conn)
        .await
        .unwrap();
        keys.push(hash);
    }
    conn.close().await.unwrap();
    let store = db.store().await;
    for (hash, (owner, via, _, reach)) in keys.iter().zip(cases) {
        let read = store.key_by_hash(hash).await.unwrap().unwrap();
        assert_eq!(read.kind.admin_reach(), reach, "{owner:?} by {via}");
    }
}

/// Waits (at most 10 s) until `replica` has a keys version other than
/// `before`: it heard of a change.
async fn heard_of_a_change(replica: &svc_store::SqlStore, before: Option<u64>) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while replica.keys_version() == before {
        assert!(
            std::time::Instant::now() < deadline,
            "the replica never saw the change"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// A project's and a key's MCP server lists are stored, read back with
/// the key (its project's too), judge it through `may_use_mcp_server`,
/// and changing either is a key change every store hears of.
async fn mcp_server_lists_are_stored_and_judge_keys_on_every_store(db: &Db) {
    let store = db.store().await;
    let replica = db.store().await;
    let docs_and_git = McpServerAccess::only(vec!["docs".into(), "git*".into()]).unwrap();
    let team = ProjectRecord {
        allowed_mcp_servers: docs_and_git.clone(),
        ..project("team", 10, ModelAccess::any())
    };
    store.insert_project(&team).await.unwrap();
    assert_eq!(
        store.project_by_id(&team.id).await.unwrap(),
        Some(team.clone())
    );
    let (mut record, hash) = new_key(None, 1);
    record.project_id = team.id.clone();
    record.allowed_mcp_servers =
        McpServerAccess::only(vec!["github".into(), "docs".into()]).unwrap();
    store.insert_key(&record, &hash).await.unwrap();
    let (mut shut, shut_hash) = new_key(None, 2);
    shut.allowed_mcp_servers = McpServerAccess::only(vec![]).unwrap();
    store.insert_key(&shut, &shut_hash).await.unwrap();

    let read = replica.key_by_hash(&hash).await.unwrap().unwrap();
    assert_eq!(read.allowed_mcp_servers, record.allowed_mcp_servers);
    assert_eq!(read.project_allowed_mcp_servers, docs_and_git);
    assert!(read.may_use_mcp_server("github") && read.may_use_mcp_server("docs"));
    assert!(!read.may_use_mcp_server("gitlab"), "the key's own list");
    assert!(!read.may_use_mcp_server("wiki"), "neither list");
    let shut_read = store.key_by_id(&shut.id).await.unwrap().unwrap();
    assert_eq!(
        shut_read.project_allowed_mcp_servers,
        McpServerAccess::any()
    );
    assert!(
        !shut_read.may_use_mcp_server("docs"),
        "an empty list allows none"
    );
    // Keys list with their lists as well.
    let listed = store.list_project_keys(&team.id).await.unwrap();
    assert_eq!(listed, vec![read.clone()]);

    // PostgreSQL's listener starts in the background: until it has, the
    // version is `None`.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while replica.keys_version().is_none() {
        assert!(std::time::Instant::now() < deadline, "no keys version");
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }

    // The project's list narrows: the key follows, on the replica too.
    let before = replica.keys_version();
    let docs_only = McpServerAccess::only(vec!["docs".into()]).unwrap();
    let narrowed = ProjectRecord {
        allowed_mcp_servers: docs_only.clone(),
        ..team.clone()
    };
    assert!(store.update_project(&narrowed).await.unwrap());
    assert_eq!(
        store.project_by_id(&team.id).await.unwrap(),
        Some(narrowed.clone())
    );
    heard_of_a_change(&replica, before).await;
    let read = replica.key_by_hash(&hash).await.unwrap().unwrap();
    assert_eq!(read.project_allowed_mcp_servers, docs_only);
    assert!(!read.may_use_mcp_server("github"), "the project's list");
    assert!(read.may_use_mcp_server("docs"));

    // The key's own list is set (and set back to every server) alone.
    let before = replica.keys_version();
    assert!(
        store
            .set_key_mcp_servers(&record.id, &McpServerAccess::only(vec![]).unwrap())
            .await
            .unwrap()
    );
    heard_of_a_change(&replica, before).await;
    let read = replica.key_by_hash(&hash).await.unwrap().unwrap();
    assert_eq!(
        read.allowed_mcp_servers,
        McpServerAccess::only(vec![]).unwrap()
    );
    assert_eq!(
        read.allowed_models, record.allowed_models,
        "nothing else changed"
    );
    assert!(!read.may_use_mcp_server("docs"));
    assert!(
        store
            .set_key_mcp_servers(&record.id, &McpServerAccess::any())
            .await
            .unwrap()
    );
    let read = store.key_by_id(&record.id).await.unwrap().unwrap();
    assert_eq!(read.allowed_mcp_servers, McpServerAccess::any());
    assert!(read.may_use_mcp_server("docs") && !read.may_use_mcp_server("github"));
    assert!(
        !store
            .set_key_mcp_servers(
                &svc_core::ids::KeyId("key_missing".into()),
                &McpServerAccess::any()
            )
            .await
            .unwrap()
    );

    // A stored list that is no JSON list of strings is an error naming
    // its column, never "every server".
    db.execute(&format!(
        "UPDATE api_keys SET allowed_mcp_servers = 'docs' WHERE id = '{}'",
        record.id.0
    ))
    .await;
    let err = store.key_by_hash(&hash).await.unwrap_err();
    assert!(err.to_string().contains("allowed_mcp_servers"), "{err}");
}
