//! The ResponseStore contract, run on SQLite and on PostgreSQL.
#![expect(
    clippy::unwrap_used,
    clippy::panic,
    clippy::disallowed_methods,
    reason = "test code: a failed check fails the test, output goes to its log, and its tasks end with it"
)]

mod common;

use common::{Db, join_all, random_hex};
use sqlx::Executor;
use svc_core::conversation::{
    Conversation, ConversationLimits, StorageQuota, StorageUsage, Stored, StoredResponse, Turn,
};
use svc_core::ids::ProjectId;
use svc_core::store::{ResponseStore, StoreError};

on_both_backends!(
    responses_are_read_by_their_owner_only,
    expired_responses_are_not_served_and_are_swept,
    responses_are_deleted_by_their_owner_only,
    a_duplicate_id_is_a_conflict,
    a_conversation_is_read_as_its_chain_first_turn_first,
    a_conversation_past_the_limits_is_refused_unread,
    deleting_a_response_keeps_the_ones_that_continue_it,
    a_deleted_response_is_not_continued,
    expired_responses_stay_while_a_served_one_continues_them,
    a_long_expired_chain_goes_over_several_sweeps,
    a_project_past_its_quota_stores_nothing,
    concurrent_inserts_never_pass_the_quota,
    rows_stored_before_chains_stay_readable,
);

/// Room for anything these tests store.
const ROOMY: StorageQuota = StorageQuota {
    bytes: 1 << 30,
    responses: 1000,
};

/// Most any conversation here holds.
const ANY: ConversationLimits = ConversationLimits {
    responses: 100,
    bytes: 1 << 30,
};

fn response(owner: &str, created_at: i64, expires_at: i64) -> StoredResponse {
    let id = format!("resp_{}", random_hex(12));
    StoredResponse {
        response: format!("{{\"id\":\"{id}\",\"text\":\"caf\u{e9} \u{1F600}\"}}"),
        conversation: format!("[{{\"role\":\"user\",\"content\":\"{id}\"}}]"),
        id,
        owner: owner.into(),
        project_id: ProjectId::default_project(),
        created_at,
        expires_at,
        previous_id: None,
    }
}

/// A response of the same owner that continues `previous`.
fn continuing(previous: &StoredResponse, expires_at: i64) -> StoredResponse {
    StoredResponse {
        previous_id: Some(previous.id.clone()),
        project_id: previous.project_id.clone(),
        ..response(&previous.owner, previous.created_at, expires_at)
    }
}

/// What a continuation of `id` reads of its turns.
async fn turns(store: &impl ResponseStore, id: &str, owner: &str, at: i64) -> Option<Vec<String>> {
    match store.conversation(id, owner, at, ANY).await.unwrap()? {
        Conversation::Turns(turns) => Some(
            turns
                .into_iter()
                .map(|t| {
                    assert_eq!(t.legacy_response, None);
                    t.items
                })
                .collect(),
        ),
        other => panic!("{other:?}"),
    }
}

async fn responses_are_read_by_their_owner_only(db: &Db) {
    let store = db.store().await;
    let mine = response("user:a", 100, 1000);
    assert_eq!(
        store.insert_response(&mine, ROOMY).await.unwrap(),
        Stored::Kept
    );
    let read = store.response_by_id(&mine.id, "user:a", 100).await.unwrap();
    assert_eq!(read.as_ref(), Some(&mine), "stored as given, text intact");
    assert_eq!(
        store
            .response_object(&mine.id, "user:a", 100)
            .await
            .unwrap(),
        Some(mine.response.clone())
    );
    assert_eq!(
        store
            .response_object(&mine.id, "user:b", 100)
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        store.response_by_id(&mine.id, "user:b", 100).await.unwrap(),
        None
    );
    assert_eq!(
        store
            .response_by_id(&mine.id, "operator", 100)
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        store
            .response_by_id("resp_none", "user:a", 100)
            .await
            .unwrap(),
        None
    );
    // Nor is its conversation another owner's.
    assert_eq!(turns(&store, &mine.id, "user:b", 100).await, None);
    // Another replica sees it.
    let other = db.store().await;
    assert!(
        other
            .response_by_id(&mine.id, "user:a", 100)
            .await
            .unwrap()
            .is_some()
    );
}

async fn expired_responses_are_not_served_and_are_swept(db: &Db) {
    let store = db.store().await;
    let old = response("operator", 0, 100);
    let live = response("operator", 0, 200);
    store.insert_response(&old, ROOMY).await.unwrap();
    store.insert_response(&live, ROOMY).await.unwrap();
    assert!(
        store
            .response_by_id(&old.id, "operator", 99)
            .await
            .unwrap()
            .is_some()
    );
    assert_eq!(
        store
            .response_by_id(&old.id, "operator", 100)
            .await
            .unwrap(),
        None,
        "expired at expires_at"
    );
    assert_eq!(turns(&store, &old.id, "operator", 100).await, None);
    assert_eq!(
        store
            .response_object(&old.id, "operator", 100)
            .await
            .unwrap(),
        None
    );
    assert_eq!(store.delete_expired_responses(100).await.unwrap(), 1);
    assert_eq!(db.scalar("SELECT COUNT(*) FROM responses").await, 1);
    assert!(
        store
            .response_by_id(&live.id, "operator", 100)
            .await
            .unwrap()
            .is_some()
    );
    assert_eq!(store.delete_expired_responses(100).await.unwrap(), 0);
    assert_eq!(
        store
            .response_storage(&ProjectId::default_project())
            .await
            .unwrap(),
        StorageUsage {
            bytes: live.stored_bytes(),
            responses: 1
        },
        "the sweep is counted"
    );
}

async fn responses_are_deleted_by_their_owner_only(db: &Db) {
    let store = db.store().await;
    let mine = response("user:a", 0, 1000);
    store.insert_response(&mine, ROOMY).await.unwrap();
    assert!(!store.delete_response(&mine.id, "user:b").await.unwrap());
    assert!(store.delete_response(&mine.id, "user:a").await.unwrap());
    assert!(!store.delete_response(&mine.id, "user:a").await.unwrap());
    assert_eq!(
        store.response_by_id(&mine.id, "user:a", 0).await.unwrap(),
        None
    );
    // Nothing continues it: it is gone at once, and uncounted.
    assert_eq!(db.scalar("SELECT COUNT(*) FROM responses").await, 0);
    assert_eq!(
        store
            .response_storage(&ProjectId::default_project())
            .await
            .unwrap(),
        StorageUsage::default()
    );
}

async fn a_duplicate_id_is_a_conflict(db: &Db) {
    let store = db.store().await;
    let first = response("user:a", 0, 1000);
    store.insert_response(&first, ROOMY).await.unwrap();
    let again = StoredResponse {
        owner: "user:b".into(),
        ..first.clone()
    };
    assert!(matches!(
        store.insert_response(&again, ROOMY).await,
        Err(StoreError::Conflict)
    ));
    assert_eq!(
        store
            .response_storage(&ProjectId::default_project())
            .await
            .unwrap()
            .responses,
        1,
        "the conflict is not counted"
    );
}

async fn a_conversation_is_read_as_its_chain_first_turn_first(db: &Db) {
    let store = db.store().await;
    let first = response("user:a", 0, 1000);
    let second = continuing(&first, 1000);
    let third = continuing(&second, 1000);
    // A branch from the first turn: its own chain.
    let other = continuing(&first, 1000);
    for r in [&first, &second, &third, &other] {
        assert_eq!(store.insert_response(r, ROOMY).await.unwrap(), Stored::Kept);
    }
    let items = |rs: &[&StoredResponse]| Some(rs.iter().map(|r| r.conversation.clone()).collect());
    assert_eq!(
        turns(&store, &third.id, "user:a", 0).await,
        items(&[&first, &second, &third])
    );
    assert_eq!(
        turns(&store, &second.id, "user:a", 0).await,
        items(&[&first, &second])
    );
    assert_eq!(
        turns(&store, &other.id, "user:a", 0).await,
        items(&[&first, &other])
    );
    assert_eq!(
        turns(&store, &first.id, "user:a", 0).await,
        items(&[&first])
    );
    // Each row is stored once: the project counts four rows' bytes.
    let bytes: u64 = [&first, &second, &third, &other]
        .iter()
        .map(|r| r.stored_bytes())
        .sum();
    assert_eq!(
        store
            .response_storage(&ProjectId::default_project())
            .await
            .unwrap(),
        StorageUsage {
            bytes,
            responses: 4
        }
    );
    // A response of another owner cannot continue it.
    let stranger = StoredResponse {
        owner: "user:b".into(),
        ..continuing(&third, 1000)
    };
    assert_eq!(
        store.insert_response(&stranger, ROOMY).await.unwrap(),
        Stored::PreviousGone
    );
}

async fn a_conversation_past_the_limits_is_refused_unread(db: &Db) {
    let store = db.store().await;
    let first = response("user:a", 0, 1000);
    let second = continuing(&first, 1000);
    let third = continuing(&second, 1000);
    for r in [&first, &second, &third] {
        store.insert_response(r, ROOMY).await.unwrap();
    }
    let bytes: u64 = [&first, &second, &third]
        .iter()
        .map(|r| r.conversation.len() as u64)
        .sum();
    let read = |limits| {
        let store = store.clone();
        let id = third.id.clone();
        async move { store.conversation(&id, "user:a", 0, limits).await.unwrap() }
    };
    let too_long = Some(Conversation::TooLong {
        responses: 3,
        bytes,
    });
    let limits = |responses, bytes| ConversationLimits { responses, bytes };
    assert_eq!(read(limits(2, bytes)).await, too_long);
    assert_eq!(read(limits(3, bytes - 1)).await, too_long);
    assert!(matches!(
        read(limits(3, bytes)).await,
        Some(Conversation::Turns(turns)) if turns.len() == 3
    ));
}

async fn deleting_a_response_keeps_the_ones_that_continue_it(db: &Db) {
    let store = db.store().await;
    let first = response("user:a", 0, 1000);
    let second = continuing(&first, 1000);
    let third = continuing(&second, 1000);
    for r in [&first, &second, &third] {
        store.insert_response(r, ROOMY).await.unwrap();
    }
    // The middle turn, deleted: not served, not continued, but the last
    // turn's conversation is whole.
    assert!(store.delete_response(&second.id, "user:a").await.unwrap());
    assert_eq!(
        store.response_by_id(&second.id, "user:a", 0).await.unwrap(),
        None
    );
    assert_eq!(turns(&store, &second.id, "user:a", 0).await, None);
    assert_eq!(
        store
            .response_object(&second.id, "user:a", 0)
            .await
            .unwrap(),
        None
    );
    assert!(!store.delete_response(&second.id, "user:a").await.unwrap());
    assert_eq!(
        turns(&store, &third.id, "user:a", 0).await,
        Some(vec![
            first.conversation.clone(),
            second.conversation.clone(),
            third.conversation.clone()
        ])
    );
    assert_eq!(db.scalar("SELECT COUNT(*) FROM responses").await, 3);
    // The sweep keeps it as well.
    assert_eq!(store.delete_expired_responses(10).await.unwrap(), 0);
    // The last turn deleted: it and the deleted one before it go; the
    // first, still served, stays.
    assert!(store.delete_response(&third.id, "user:a").await.unwrap());
    assert_eq!(db.scalar("SELECT COUNT(*) FROM responses").await, 1);
    assert_eq!(
        turns(&store, &first.id, "user:a", 0).await,
        Some(vec![first.conversation.clone()])
    );
    assert!(store.delete_response(&first.id, "user:a").await.unwrap());
    assert_eq!(db.scalar("SELECT COUNT(*) FROM responses").await, 0);
    assert_eq!(
        store
            .response_storage(&ProjectId::default_project())
            .await
            .unwrap(),
        StorageUsage::default()
    );
}

async fn a_deleted_response_is_not_continued(db: &Db) {
    let store = db.store().await;
    let first = response("user:a", 0, 1000);
    let kept = continuing(&first, 1000);
    store.insert_response(&first, ROOMY).await.unwrap();
    store.insert_response(&kept, ROOMY).await.unwrap();
    assert!(store.delete_response(&first.id, "user:a").await.unwrap());
    // Still stored (the kept turn needs it), yet deleted: refused.
    let late = continuing(&first, 1000);
    assert_eq!(
        store.insert_response(&late, ROOMY).await.unwrap(),
        Stored::PreviousGone
    );
    // Gone altogether: refused too.
    let gone = response("user:a", 0, 1000);
    store.insert_response(&gone, ROOMY).await.unwrap();
    assert!(store.delete_response(&gone.id, "user:a").await.unwrap());
    assert_eq!(
        store
            .insert_response(&continuing(&gone, 1000), ROOMY)
            .await
            .unwrap(),
        Stored::PreviousGone
    );
    assert_eq!(db.scalar("SELECT COUNT(*) FROM responses").await, 2);
    assert_eq!(
        store
            .response_storage(&ProjectId::default_project())
            .await
            .unwrap()
            .responses,
        2
    );
}

async fn expired_responses_stay_while_a_served_one_continues_them(db: &Db) {
    let store = db.store().await;
    let first = response("user:a", 0, 100);
    let second = continuing(&first, 150);
    let third = continuing(&second, 200);
    // A turn that went another way, and expired.
    let aside = continuing(&first, 120);
    for r in [&first, &second, &third, &aside] {
        store.insert_response(r, ROOMY).await.unwrap();
    }
    // At 160 only the third is served: the two before it stay for it,
    // the one aside goes.
    assert_eq!(store.delete_expired_responses(160).await.unwrap(), 1);
    assert_eq!(
        store.response_by_id(&aside.id, "user:a", 0).await.unwrap(),
        None
    );
    assert_eq!(
        store
            .response_by_id(&first.id, "user:a", 160)
            .await
            .unwrap(),
        None,
        "kept, not served"
    );
    assert_eq!(turns(&store, &second.id, "user:a", 160).await, None);
    assert_eq!(
        turns(&store, &third.id, "user:a", 160).await,
        Some(vec![
            first.conversation.clone(),
            second.conversation.clone(),
            third.conversation.clone()
        ])
    );
    // Once the third expires, the conversation goes whole.
    assert_eq!(store.delete_expired_responses(200).await.unwrap(), 3);
    assert_eq!(db.scalar("SELECT COUNT(*) FROM responses").await, 0);
    assert_eq!(
        store
            .response_storage(&ProjectId::default_project())
            .await
            .unwrap(),
        StorageUsage::default()
    );
}

async fn a_long_expired_chain_goes_over_several_sweeps(db: &Db) {
    let store = db.store().await;
    let mut last = response("user:a", 0, 100);
    store.insert_response(&last, ROOMY).await.unwrap();
    for _ in 1..40 {
        last = continuing(&last, 100);
        store.insert_response(&last, ROOMY).await.unwrap();
    }
    // A sweep takes a bounded run of turns, from the last; the next goes on.
    assert_eq!(store.delete_expired_responses(100).await.unwrap(), 32);
    assert_eq!(store.delete_expired_responses(100).await.unwrap(), 8);
    assert_eq!(db.scalar("SELECT COUNT(*) FROM responses").await, 0);
}

async fn a_project_past_its_quota_stores_nothing(db: &Db) {
    let store = db.store().await;
    let project = ProjectId::generate();
    let in_project = |r: StoredResponse| StoredResponse {
        project_id: project.clone(),
        owner: format!("user:a@{}", project.0),
        ..r
    };
    let first = in_project(response("", 0, 1000));
    let size = first.stored_bytes();
    let two = StorageQuota {
        bytes: 1 << 20,
        responses: 2,
    };
    assert_eq!(
        store.insert_response(&first, two).await.unwrap(),
        Stored::Kept
    );
    let second = continuing(&first, 1000);
    assert_eq!(
        store.insert_response(&second, two).await.unwrap(),
        Stored::Kept
    );
    let used = StorageUsage {
        bytes: size + second.stored_bytes(),
        responses: 2,
    };
    let third = continuing(&second, 1000);
    assert_eq!(
        store.insert_response(&third, two).await.unwrap(),
        Stored::OverQuota(used)
    );
    // By bytes: exactly full fits, one byte more does not.
    let exactly = StorageQuota {
        bytes: used.bytes + third.stored_bytes(),
        responses: 10,
    };
    let short = StorageQuota {
        bytes: exactly.bytes - 1,
        ..exactly
    };
    assert_eq!(
        store.insert_response(&third, short).await.unwrap(),
        Stored::OverQuota(used)
    );
    // Nothing of a refused one was written.
    assert_eq!(db.scalar("SELECT COUNT(*) FROM responses").await, 2);
    assert_eq!(store.response_storage(&project).await.unwrap(), used);
    assert_eq!(
        store
            .response_by_id(&third.id, &third.owner, 0)
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        store.insert_response(&third, exactly).await.unwrap(),
        Stored::Kept
    );
    // Another project has its own room.
    let elsewhere = response("user:a", 0, 1000);
    assert_eq!(
        store.insert_response(&elsewhere, two).await.unwrap(),
        Stored::Kept
    );
    // Deleting makes room again.
    assert!(
        store
            .delete_response(&third.id, &third.owner)
            .await
            .unwrap()
    );
    let fourth = continuing(&second, 1000);
    assert_eq!(
        store.insert_response(&fourth, exactly).await.unwrap(),
        Stored::Kept
    );
}

async fn concurrent_inserts_never_pass_the_quota(db: &Db) {
    let store = db.store().await;
    let other = db.store().await;
    let five = StorageQuota {
        bytes: 1 << 20,
        responses: 5,
    };
    let results = join_all(24, |i| {
        // Two stores, as two replicas would insert.
        let store = if i % 2 == 0 {
            store.clone()
        } else {
            other.clone()
        };
        async move {
            store
                .insert_response(&response("user:a", 0, 1000), five)
                .await
                .unwrap()
        }
    })
    .await;
    let kept = results.iter().filter(|r| **r == Stored::Kept).count();
    assert_eq!(kept, 5, "{results:?}");
    assert_eq!(db.scalar("SELECT COUNT(*) FROM responses").await, 5);
    assert_eq!(
        store
            .response_storage(&ProjectId::default_project())
            .await
            .unwrap()
            .responses,
        5
    );
}

async fn rows_stored_before_chains_stay_readable(db: &Db) {
    // The schema before 0013 (and so before 0014, which made chains), with
    // a row as svc stored it then: every input item before the output in
    // conversation, the output only in the response.
    let mut conn = db.migrated_before(13).await;
    let response = r#"{"id":"resp_old","output":[{"type":"message","content":"one"}]}"#;
    let conversation = r#"[{"role":"user","content":"one"}]"#;
    conn.execute(
        format!(
            "INSERT INTO responses (id, owner, created_at, expires_at, response, conversation) \
             VALUES ('resp_old', 'user:a@proj_x', 1, 1000, '{response}', '{conversation}'), \
             ('resp_gone', 'user:a', 1, 1000, '{response}', '{conversation}')"
        )
        .as_str(),
    )
    .await
    .unwrap();
    drop(conn);
    let store = db.store().await;
    let old = store
        .response_by_id("resp_old", "user:a@proj_x", 1)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(old.project_id, ProjectId("proj_x".into()));
    assert_eq!(old.previous_id, None);
    assert_eq!(old.response, response);
    let size = (response.len() + conversation.len()) as u64;
    assert_eq!(
        store
            .response_storage(&ProjectId("proj_x".into()))
            .await
            .unwrap(),
        StorageUsage {
            bytes: size,
            responses: 1
        },
        "counted for its project"
    );
    // Read with its response, which holds its output; sized with it too.
    let legacy = Turn {
        items: conversation.into(),
        legacy_response: Some(response.into()),
    };
    assert_eq!(
        store
            .conversation("resp_old", "user:a@proj_x", 1, ANY)
            .await
            .unwrap(),
        Some(Conversation::Turns(vec![legacy.clone()]))
    );
    let limits = ConversationLimits {
        responses: 10,
        bytes: size - 1,
    };
    assert_eq!(
        store
            .conversation("resp_old", "user:a@proj_x", 1, limits)
            .await
            .unwrap(),
        Some(Conversation::TooLong {
            responses: 1,
            bytes: size
        })
    );
    // Continued, it is the first turn of a chain.
    let next = continuing(&old, 1000);
    assert_eq!(
        store.insert_response(&next, ROOMY).await.unwrap(),
        Stored::Kept
    );
    let fresh = Turn {
        items: next.conversation.clone(),
        legacy_response: None,
    };
    assert_eq!(
        store
            .conversation(&next.id, "user:a@proj_x", 1, ANY)
            .await
            .unwrap(),
        Some(Conversation::Turns(vec![legacy, fresh]))
    );
    // And deleted as any other.
    assert!(store.delete_response("resp_gone", "user:a").await.unwrap());
    assert_eq!(
        store
            .response_storage(&ProjectId::default_project())
            .await
            .unwrap(),
        StorageUsage::default()
    );
}
