//! Files and batches on SQLite and PostgreSQL: a project's files within its
//! quota and only its own, lists newest first with cursors, lines leased to
//! one replica at a time and answered once, batches taken to end on a lease
//! that only its owner ends, and ended batches swept with their files.
#![expect(
    clippy::unwrap_used,
    clippy::panic,
    clippy::print_stderr,
    clippy::disallowed_methods,
    reason = "test code: a failed check fails the test, output goes to its log, and its tasks end with it"
)]

mod common;

use std::collections::HashSet;
use std::time::Instant;

use common::{Db, join_all};
use svc_core::batch::{
    Answered, AnsweredLine, BatchLimits, BatchLine, BatchRecord, BatchRefused, BatchStatus,
    BatchStore, FileRecord, Lease, LineAnswer,
};
use svc_core::ids::{KeyId, ProjectId};

on_both_backends!(
    a_file_past_the_quota_is_refused,
    concurrent_uploads_never_pass_the_quota_together,
    files_are_listed_newest_first_with_a_cursor_and_a_purpose,
    another_project_sees_no_file_and_no_batch,
    batches_are_listed_newest_first_with_a_cursor,
    cancelling_moves_only_a_running_batch,
    leases_are_disjoint_and_taken_again_once_ended,
    concurrent_leases_never_share_a_line,
    lines_of_a_batch_not_in_progress_are_not_leased,
    renewing_extends_the_owners_pending_lines,
    a_line_is_answered_and_counted_once,
    concurrent_answers_of_a_line_count_once,
    a_batch_with_no_pending_line_is_taken_to_complete,
    a_cancelling_batch_is_taken_once_no_line_is_on_a_live_lease,
    a_batch_past_its_expiry_is_taken_to_expire,
    a_finalizing_batch_whose_lease_ended_is_taken_again,
    only_the_lease_owner_finishes_a_batch_and_its_files_are_recorded,
    answers_come_in_input_order,
    the_sweep_deletes_ended_batches_and_returns_their_files,
    a_large_batch_is_inserted_at_once,
    answers_count_toward_the_quota_and_one_past_it_is_not_kept,
    an_ended_batchs_answers_count_once_as_its_files,
    answers_are_read_in_pages_bounded_in_lines_and_bytes,
    projects_take_turns_for_lines,
    a_projects_keys_take_turns_for_lines,
    lines_on_a_live_lease_count_as_their_projects_turns,
    a_project_has_a_bounded_number_of_batches_in_progress,
    a_batchs_copy_of_its_lines_counts_toward_the_quota,
    concurrent_creates_never_pass_the_bound_together,
);

fn project(name: &str) -> ProjectId {
    ProjectId(format!("proj_{name}"))
}

fn file(project: &ProjectId, id: &str, purpose: &str, bytes: i64, created_at: i64) -> FileRecord {
    FileRecord {
        id: id.to_owned(),
        project_id: project.clone(),
        purpose: purpose.to_owned(),
        filename: format!("{id}.jsonl"),
        bytes,
        created_at,
    }
}

/// An `in_progress` batch of `total` lines, created at `created_at`,
/// expiring at `expires_at`.
fn batch(
    project: &ProjectId,
    id: &str,
    total: i64,
    created_at: i64,
    expires_at: i64,
) -> BatchRecord {
    BatchRecord {
        id: id.to_owned(),
        project_id: project.clone(),
        key_id: KeyId(format!("key_of_{id}")),
        endpoint: "/v1/chat/completions".to_owned(),
        input_file_id: format!("file-in-{id}"),
        completion_window: "24h".to_owned(),
        status: BatchStatus::InProgress,
        output_file_id: None,
        error_file_id: None,
        errors: None,
        metadata: Some(r#"{"team":"a"}"#.to_owned()),
        total,
        completed: 0,
        failed: 0,
        created_at,
        expires_at,
        in_progress_at: Some(created_at),
        finalizing_at: None,
        completed_at: None,
        failed_at: None,
        expired_at: None,
        cancelling_at: None,
        cancelled_at: None,
    }
}

fn lines(count: i64) -> Vec<BatchLine> {
    (0..count)
        .map(|i| BatchLine {
            index: i,
            custom_id: format!("req-{i}"),
            body: format!(r#"{{"model":"m","messages":[{{"role":"user","content":"line {i} \"quoted\" é"}}]}}"#),
        })
        .collect()
}

/// A batch of `total` lines, inserted.
async fn inserted(
    store: &impl BatchStore,
    project: &ProjectId,
    id: &str,
    total: i64,
    created_at: i64,
    expires_at: i64,
) -> BatchRecord {
    let record = batch(project, id, total, created_at, expires_at);
    store
        .insert_batch(&record, &lines(total), &UNBOUNDED)
        .await
        .unwrap()
        .unwrap();
    record
}

/// Limits no test batch reaches, but for those that test them.
const UNBOUNDED: BatchLimits = BatchLimits {
    in_progress: 1_000,
    quota: i64::MAX / 2,
};

/// Every line of a batch with its answer, read in pages of at most 5 lines
/// or 100 bytes of answers, as the runner reads them.
async fn all_answers(store: &impl BatchStore, id: &str) -> Vec<AnsweredLine> {
    let mut all: Vec<AnsweredLine> = Vec::new();
    loop {
        let after = all.last().map(|l| l.index);
        let page = store.answers_page(id, after, 5, 100).await.unwrap();
        if page.is_empty() {
            return all;
        }
        assert!(page.len() <= 5);
        all.extend(page);
    }
}

/// A batch of `total` lines of `key`, created at `created_at`, inserted.
async fn inserted_as(
    store: &impl BatchStore,
    project: &ProjectId,
    key: &KeyId,
    id: &str,
    total: i64,
    created_at: i64,
) -> BatchRecord {
    let record = BatchRecord {
        key_id: key.clone(),
        ..batch(project, id, total, created_at, 100_000)
    };
    store
        .insert_batch(&record, &lines(total), &UNBOUNDED)
        .await
        .unwrap()
        .unwrap();
    record
}

fn lease(owner: &str, until: i64) -> Lease {
    Lease {
        owner: owner.to_owned(),
        until,
    }
}

fn answer(batch_id: &str, index: i64, ok: bool) -> LineAnswer {
    LineAnswer {
        batch_id: batch_id.to_owned(),
        index,
        ok,
        output: format!(r#"{{"custom_id":"req-{index}","ok":{ok}}}"#),
    }
}

/// The (batch, index) of each line leased.
async fn leased(
    store: &impl BatchStore,
    owner: &str,
    until: i64,
    now: i64,
    limit: i64,
) -> Vec<(String, i64)> {
    store
        .lease_lines(&lease(owner, until), now, limit)
        .await
        .unwrap()
        .into_iter()
        .map(|l| (l.batch_id, l.line.index))
        .collect()
}

fn ids_of(files: &[FileRecord]) -> Vec<&str> {
    files.iter().map(|f| f.id.as_str()).collect()
}

fn batch_ids(batches: &[BatchRecord]) -> Vec<&str> {
    batches.iter().map(|b| b.id.as_str()).collect()
}

async fn a_file_past_the_quota_is_refused(db: &Db) {
    let store = db.store().await;
    let (a, b) = (project("a"), project("b"));
    // A file's name counts too: "file-N.jsonl", 12 bytes.
    assert!(
        store
            .insert_file(&file(&a, "file-1", "batch", 60, 1), 124)
            .await
            .unwrap()
    );
    assert!(
        !store
            .insert_file(&file(&a, "file-2", "batch", 41, 2), 124)
            .await
            .unwrap(),
        "60 + 41 and two names of 12 > 124"
    );
    assert_eq!(
        store.file(&a, "file-2").await.unwrap(),
        None,
        "nothing recorded"
    );
    assert!(
        store
            .insert_file(&file(&a, "file-3", "batch", 40, 3), 124)
            .await
            .unwrap(),
        "60 + 40 and two names of 12 = 124 fits"
    );
    assert!(
        !store
            .insert_file(&file(&a, "file-4", "batch", 1, 4), 124)
            .await
            .unwrap()
    );
    assert!(
        store
            .insert_file(&file(&b, "file-5", "batch", 100, 5), 124)
            .await
            .unwrap(),
        "another project's files do not count"
    );
    assert!(store.delete_file(&a, "file-1").await.unwrap());
    assert!(
        store
            .insert_file(&file(&a, "file-6", "batch", 60, 6), 124)
            .await
            .unwrap(),
        "a deleted file no longer counts"
    );
    assert_eq!(
        store.file(&a, "file-3").await.unwrap(),
        Some(file(&a, "file-3", "batch", 40, 3))
    );
}

async fn files_are_listed_newest_first_with_a_cursor_and_a_purpose(db: &Db) {
    let store = db.store().await;
    let p = project("a");
    // file-c and file-d were created in the same second: by id then.
    for (id, purpose, at) in [
        ("file-a", "batch", 1),
        ("file-b", "batch_output", 2),
        ("file-c", "batch", 3),
        ("file-d", "batch_output", 3),
        ("file-e", "batch", 4),
    ] {
        assert!(
            store
                .insert_file(&file(&p, id, purpose, 1, at), 1_000)
                .await
                .unwrap()
        );
    }
    let all = store.list_files(&p, None, None, 10).await.unwrap();
    assert_eq!(
        ids_of(&all),
        ["file-e", "file-d", "file-c", "file-b", "file-a"]
    );
    let first = store.list_files(&p, None, None, 2).await.unwrap();
    assert_eq!(ids_of(&first), ["file-e", "file-d"]);
    let next = store.list_files(&p, None, Some("file-d"), 2).await.unwrap();
    assert_eq!(ids_of(&next), ["file-c", "file-b"]);
    let last = store.list_files(&p, None, Some("file-b"), 2).await.unwrap();
    assert_eq!(ids_of(&last), ["file-a"]);
    assert!(
        store
            .list_files(&p, None, Some("file-a"), 2)
            .await
            .unwrap()
            .is_empty()
    );
    let uploaded = store.list_files(&p, Some("batch"), None, 10).await.unwrap();
    assert_eq!(ids_of(&uploaded), ["file-e", "file-c", "file-a"]);
    let uploaded = store
        .list_files(&p, Some("batch"), Some("file-d"), 10)
        .await
        .unwrap();
    assert_eq!(
        ids_of(&uploaded),
        ["file-c", "file-a"],
        "the cursor need not be of the purpose"
    );
    assert!(
        store
            .list_files(&p, Some("fine-tune"), None, 10)
            .await
            .unwrap()
            .is_empty()
    );
}

async fn another_project_sees_no_file_and_no_batch(db: &Db) {
    let store = db.store().await;
    let (a, b) = (project("a"), project("b"));
    assert!(
        store
            .insert_file(&file(&a, "file-1", "batch", 1, 1), 100)
            .await
            .unwrap()
    );
    inserted(&store, &a, "batch_1", 2, 1, 1_000).await;

    assert_eq!(store.file(&b, "file-1").await.unwrap(), None);
    assert!(
        store
            .list_files(&b, None, None, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(!store.delete_file(&b, "file-1").await.unwrap());
    assert_eq!(store.batch(Some(&b), "batch_1").await.unwrap(), None);
    assert!(store.list_batches(&b, None, 10).await.unwrap().is_empty());
    assert_eq!(store.cancel_batch(&b, "batch_1", 5).await.unwrap(), None);

    assert!(store.file(&a, "file-1").await.unwrap().is_some());
    let own = store.batch(Some(&a), "batch_1").await.unwrap().unwrap();
    assert_eq!(own, batch(&a, "batch_1", 2, 1, 1_000));
    assert_eq!(own.status, BatchStatus::InProgress, "not cancelled by b");
    assert_eq!(
        store.batch(None, "batch_1").await.unwrap(),
        Some(own),
        "any project"
    );
    assert!(store.delete_file(&a, "file-1").await.unwrap());
    assert_eq!(store.file(&a, "file-1").await.unwrap(), None);
    assert!(!store.delete_file(&a, "file-1").await.unwrap());
}

async fn batches_are_listed_newest_first_with_a_cursor(db: &Db) {
    let store = db.store().await;
    let (a, b) = (project("a"), project("b"));
    for (id, at) in [
        ("batch_a", 1),
        ("batch_b", 2),
        ("batch_c", 2),
        ("batch_d", 3),
    ] {
        inserted(&store, &a, id, 1, at, 1_000).await;
    }
    inserted(&store, &b, "batch_e", 1, 5, 1_000).await;
    let all = store.list_batches(&a, None, 10).await.unwrap();
    assert_eq!(
        batch_ids(&all),
        ["batch_d", "batch_c", "batch_b", "batch_a"]
    );
    let first = store.list_batches(&a, None, 2).await.unwrap();
    assert_eq!(batch_ids(&first), ["batch_d", "batch_c"]);
    let next = store.list_batches(&a, Some("batch_c"), 2).await.unwrap();
    assert_eq!(batch_ids(&next), ["batch_b", "batch_a"]);
    assert!(
        store
            .list_batches(&a, Some("batch_a"), 2)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        store
            .list_batches(&a, Some("batch_e"), 2)
            .await
            .unwrap()
            .is_empty(),
        "another project's batch is no cursor"
    );
}

async fn cancelling_moves_only_a_running_batch(db: &Db) {
    let store = db.store().await;
    let p = project("a");
    inserted(&store, &p, "batch_1", 2, 1, 1_000).await;
    let cancelling = store.cancel_batch(&p, "batch_1", 7).await.unwrap().unwrap();
    assert_eq!(cancelling.status, BatchStatus::Cancelling);
    assert_eq!(cancelling.cancelling_at, Some(7));
    let again = store.cancel_batch(&p, "batch_1", 9).await.unwrap().unwrap();
    assert_eq!(again, cancelling, "unchanged when not running");

    let mut validating = batch(&p, "batch_2", 1, 2, 1_000);
    validating.status = BatchStatus::Validating;
    store
        .insert_batch(&validating, &lines(1), &UNBOUNDED)
        .await
        .unwrap()
        .unwrap();
    let cancelled = store.cancel_batch(&p, "batch_2", 8).await.unwrap().unwrap();
    assert_eq!(cancelled.status, BatchStatus::Cancelling);
    assert_eq!(store.cancel_batch(&p, "batch_none", 8).await.unwrap(), None);
}

async fn leases_are_disjoint_and_taken_again_once_ended(db: &Db) {
    let store = db.store().await;
    let p = project("a");
    // One key's batches (another key's would take turns with them).
    let key = KeyId("key_a".into());
    let second = inserted_as(&store, &p, &key, "batch_2", 2, 20).await;
    inserted_as(&store, &p, &key, "batch_1", 10, 10).await;

    let a = store.lease_lines(&lease("a", 200), 100, 4).await.unwrap();
    let a_ids: Vec<_> = a
        .iter()
        .map(|l| (l.batch_id.as_str(), l.line.index))
        .collect();
    assert_eq!(
        a_ids,
        [
            ("batch_1", 0),
            ("batch_1", 1),
            ("batch_1", 2),
            ("batch_1", 3)
        ],
        "the key's oldest batch first, in input order"
    );
    assert_eq!(a[0].key_id, key);
    assert_eq!(a[0].endpoint, "/v1/chat/completions");
    assert_eq!(a[2].line, lines(10)[2]);

    let b = leased(&store, "b", 300, 100, 4).await;
    let b_want: Vec<_> = (4..8).map(|i| ("batch_1".to_owned(), i)).collect();
    assert_eq!(b, b_want, "none of a's");
    let c = leased(&store, "c", 300, 150, 10).await;
    assert_eq!(
        c,
        [
            ("batch_1".to_owned(), 8),
            ("batch_1".to_owned(), 9),
            ("batch_2".to_owned(), 0),
            ("batch_2".to_owned(), 1)
        ],
        "a's and b's leases are live"
    );
    assert!(
        leased(&store, "d", 400, 200, 10).await.is_empty(),
        "a's lease ends after 200"
    );

    let d = leased(&store, "d", 400, 201, 10).await;
    let d_want: Vec<_> = (0..4).map(|i| ("batch_1".to_owned(), i)).collect();
    assert_eq!(d, d_want, "a's ended; b's and c's are live");
    // An answered line is not leased again, even once its lease ended.
    assert!(
        store
            .answer_line(&answer(&second.id, 0, true), None)
            .await
            .unwrap()
            == Answered::Written
    );
    let e = leased(&store, "e", 500, 301, 10).await;
    assert!(e.contains(&("batch_2".to_owned(), 1)));
    assert!(!e.contains(&("batch_2".to_owned(), 0)));
    assert_eq!(e.len(), 7, "b's four, c's two, not the answered one");
}

async fn concurrent_leases_never_share_a_line(db: &Db) {
    let stores = [db.store().await, db.store().await];
    let p = project("a");
    inserted(&stores[0], &p, "batch_1", 60, 1, 1_000).await;
    let results = join_all(12, |n| {
        let store = stores[n % 2].clone();
        async move { leased(&store, &format!("replica-{n}"), 200, 100, 5).await }
    })
    .await;
    let all: Vec<_> = results.into_iter().flatten().collect();
    let distinct: HashSet<_> = all.iter().cloned().collect();
    assert_eq!(distinct.len(), all.len(), "no line twice: {all:?}");
    assert!(all.len() <= 60);
    let rest = leased(&stores[0], "last", 200, 100, 100).await;
    assert_eq!(all.len() + rest.len(), 60, "every line leased once in all");
}

async fn lines_of_a_batch_not_in_progress_are_not_leased(db: &Db) {
    let store = db.store().await;
    let p = project("a");
    inserted(&store, &p, "batch_1", 3, 1, 1_000).await;
    let mut validating = batch(&p, "batch_2", 3, 2, 1_000);
    validating.status = BatchStatus::Validating;
    store
        .insert_batch(&validating, &lines(3), &UNBOUNDED)
        .await
        .unwrap()
        .unwrap();
    store.cancel_batch(&p, "batch_1", 5).await.unwrap().unwrap();
    assert!(leased(&store, "a", 200, 100, 10).await.is_empty());
}

async fn renewing_extends_the_owners_pending_lines(db: &Db) {
    let store = db.store().await;
    let p = project("a");
    inserted(&store, &p, "batch_1", 4, 1, 1_000).await;
    assert_eq!(leased(&store, "a", 200, 100, 2).await.len(), 2);
    assert_eq!(leased(&store, "b", 200, 100, 2).await.len(), 2);
    store.renew_line_leases(&lease("a", 400)).await.unwrap();
    let taken = leased(&store, "c", 500, 300, 10).await;
    let want: Vec<_> = (2..4).map(|i| ("batch_1".to_owned(), i)).collect();
    assert_eq!(taken, want, "b's ended at 200, a's were renewed to 400");
}

async fn a_line_is_answered_and_counted_once(db: &Db) {
    let store = db.store().await;
    let p = project("a");
    inserted(&store, &p, "batch_1", 3, 1, 1_000).await;
    assert!(
        store
            .answer_line(&answer("batch_1", 0, true), None)
            .await
            .unwrap()
            == Answered::Written
    );
    assert!(
        store
            .answer_line(&answer("batch_1", 0, true), None)
            .await
            .unwrap()
            == Answered::Not
    );
    assert!(
        store
            .answer_line(&answer("batch_1", 0, false), None)
            .await
            .unwrap()
            == Answered::Not
    );
    assert!(
        store
            .answer_line(&answer("batch_1", 1, false), None)
            .await
            .unwrap()
            == Answered::Written
    );
    assert!(
        store
            .answer_line(&answer("batch_1", 7, true), None)
            .await
            .unwrap()
            == Answered::Not,
        "no such line"
    );
    assert!(
        store
            .answer_line(&answer("batch_none", 0, true), None)
            .await
            .unwrap()
            == Answered::Not
    );
    let record = store.batch(None, "batch_1").await.unwrap().unwrap();
    assert_eq!((record.completed, record.failed), (1, 1));
}

async fn concurrent_answers_of_a_line_count_once(db: &Db) {
    let stores = [db.store().await, db.store().await];
    let p = project("a");
    inserted(&stores[0], &p, "batch_1", 2, 1, 1_000).await;
    let results = join_all(8, |n| {
        let store = stores[n % 2].clone();
        async move {
            store
                .answer_line(&answer("batch_1", 1, n % 3 == 0), None)
                .await
                .unwrap()
                == Answered::Written
        }
    })
    .await;
    assert_eq!(
        results.iter().filter(|answered| **answered).count(),
        1,
        "{results:?}"
    );
    let record = stores[0].batch(None, "batch_1").await.unwrap().unwrap();
    assert_eq!(record.completed + record.failed, 1);
    let answers = all_answers(&stores[0], "batch_1").await;
    assert_eq!(answers[0].answer, None);
    let (ok, _) = answers[1].answer.clone().unwrap();
    assert_eq!(ok, record.completed == 1, "the count is the answer's");
}

async fn a_batch_with_no_pending_line_is_taken_to_complete(db: &Db) {
    let store = db.store().await;
    let p = project("a");
    inserted(&store, &p, "batch_1", 2, 1, 1_000).await;
    assert_eq!(
        store
            .take_batch_to_finish(&lease("a", 200), 100)
            .await
            .unwrap(),
        None
    );
    assert!(
        store
            .answer_line(&answer("batch_1", 0, true), None)
            .await
            .unwrap()
            == Answered::Written
    );
    assert_eq!(
        store
            .take_batch_to_finish(&lease("a", 200), 100)
            .await
            .unwrap(),
        None
    );
    assert!(
        store
            .answer_line(&answer("batch_1", 1, false), None)
            .await
            .unwrap()
            == Answered::Written
    );
    let (record, to) = store
        .take_batch_to_finish(&lease("a", 200), 100)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(to, BatchStatus::Completed);
    assert_eq!(record.id, "batch_1");
    assert_eq!(record.status, BatchStatus::Finalizing);
    assert_eq!(record.finalizing_at, Some(100));
    assert_eq!((record.completed, record.failed), (1, 1));
    assert_eq!(
        store
            .take_batch_to_finish(&lease("b", 300), 150)
            .await
            .unwrap(),
        None,
        "a's lease is live"
    );
    assert!(
        store
            .answer_line(&answer("batch_1", 0, true), None)
            .await
            .unwrap()
            == Answered::Not,
        "answered already"
    );
}

async fn a_cancelling_batch_is_taken_once_no_line_is_on_a_live_lease(db: &Db) {
    let store = db.store().await;
    let p = project("a");
    inserted(&store, &p, "batch_1", 3, 1, 1_000).await;
    assert_eq!(leased(&store, "runner", 200, 100, 1).await.len(), 1);
    store
        .cancel_batch(&p, "batch_1", 110)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        store
            .take_batch_to_finish(&lease("a", 300), 150)
            .await
            .unwrap(),
        None,
        "line 0 is on a live lease"
    );
    // A leased line of a cancelling batch is still answered.
    assert!(
        store
            .answer_line(&answer("batch_1", 0, true), None)
            .await
            .unwrap()
            == Answered::Written
    );
    let (record, to) = store
        .take_batch_to_finish(&lease("a", 300), 150)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(to, BatchStatus::Cancelled);
    assert_eq!(record.status, BatchStatus::Finalizing);
    assert_eq!(record.cancelling_at, Some(110));
    assert_eq!(record.completed, 1);
    assert!(
        store
            .answer_line(&answer("batch_1", 1, true), None)
            .await
            .unwrap()
            == Answered::Not,
        "a finalizing batch's lines are not answered"
    );

    // The same once the lease ends, without an answer.
    inserted(&store, &p, "batch_2", 2, 2, 1_000).await;
    assert_eq!(leased(&store, "runner", 200, 100, 1).await.len(), 1);
    store
        .cancel_batch(&p, "batch_2", 110)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        store
            .take_batch_to_finish(&lease("a", 300), 200)
            .await
            .unwrap(),
        None
    );
    let (record, to) = store
        .take_batch_to_finish(&lease("a", 300), 201)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (record.id.as_str(), to),
        ("batch_2", BatchStatus::Cancelled)
    );
    let answers = all_answers(&store, "batch_2").await;
    assert!(
        answers.iter().all(|a| a.answer.is_none()),
        "never answered: {answers:?}"
    );
}

async fn a_batch_past_its_expiry_is_taken_to_expire(db: &Db) {
    let store = db.store().await;
    let p = project("a");
    inserted(&store, &p, "batch_1", 3, 1, 500).await;
    assert!(
        store
            .answer_line(&answer("batch_1", 0, true), None)
            .await
            .unwrap()
            == Answered::Written
    );
    assert_eq!(leased(&store, "runner", 900, 100, 1).await.len(), 1);
    assert_eq!(
        store
            .take_batch_to_finish(&lease("a", 900), 500)
            .await
            .unwrap(),
        None
    );
    let (record, to) = store
        .take_batch_to_finish(&lease("a", 900), 501)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(to, BatchStatus::Expired, "even with a line on a live lease");
    assert_eq!(record.status, BatchStatus::Finalizing);
    let answers = all_answers(&store, "batch_1").await;
    let answered: Vec<bool> = answers.iter().map(|a| a.answer.is_some()).collect();
    assert_eq!(answered, [true, false, false], "the rest stay pending");
    assert!(
        store
            .finish_batch("batch_1", "a", to, 502, &[])
            .await
            .unwrap()
    );
    let ended = store.batch(None, "batch_1").await.unwrap().unwrap();
    assert_eq!(ended.status, BatchStatus::Expired);
    assert_eq!(ended.expired_at, Some(502));
    assert_eq!(ended.completed, 1);
    assert!(
        all_answers(&store, "batch_1").await.is_empty(),
        "its lines went with its end"
    );

    // A batch past its expiry with every line answered completes.
    inserted(&store, &p, "batch_2", 1, 2, 500).await;
    assert!(
        store
            .answer_line(&answer("batch_2", 0, false), None)
            .await
            .unwrap()
            == Answered::Written
    );
    let (record, to) = store
        .take_batch_to_finish(&lease("a", 900), 600)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (record.id.as_str(), to),
        ("batch_2", BatchStatus::Completed)
    );

    // So does one still validating.
    let mut validating = batch(&p, "batch_3", 1, 3, 500);
    validating.status = BatchStatus::Validating;
    store
        .insert_batch(&validating, &lines(1), &UNBOUNDED)
        .await
        .unwrap()
        .unwrap();
    let (record, to) = store
        .take_batch_to_finish(&lease("a", 900), 600)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((record.id.as_str(), to), ("batch_3", BatchStatus::Expired));
    assert_eq!(
        store
            .take_batch_to_finish(&lease("a", 900), 600)
            .await
            .unwrap(),
        None
    );
}

async fn a_finalizing_batch_whose_lease_ended_is_taken_again(db: &Db) {
    let store = db.store().await;
    let p = project("a");
    inserted(&store, &p, "batch_1", 1, 1, 10_000).await;
    store
        .cancel_batch(&p, "batch_1", 50)
        .await
        .unwrap()
        .unwrap();
    let (first, to) = store
        .take_batch_to_finish(&lease("a", 200), 100)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(to, BatchStatus::Cancelled);
    assert_eq!(
        store
            .take_batch_to_finish(&lease("b", 400), 200)
            .await
            .unwrap(),
        None
    );
    let (again, to) = store
        .take_batch_to_finish(&lease("b", 400), 201)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        to,
        BatchStatus::Cancelled,
        "where the first taker meant it to go"
    );
    assert_eq!(again, first, "finalizing since the first take");
    assert_eq!(again.finalizing_at, Some(100));
    assert_eq!(
        store
            .take_batch_to_finish(&lease("c", 600), 300)
            .await
            .unwrap(),
        None
    );
    assert!(
        !store
            .finish_batch("batch_1", "a", to, 300, &[])
            .await
            .unwrap(),
        "a's lease was taken"
    );
    assert!(
        store
            .finish_batch("batch_1", "b", to, 300, &[])
            .await
            .unwrap()
    );
    let ended = store.batch(None, "batch_1").await.unwrap().unwrap();
    assert_eq!(ended.status, BatchStatus::Cancelled);
    assert_eq!(ended.cancelled_at, Some(300));
    assert_eq!(
        store
            .take_batch_to_finish(&lease("c", 600), 10_001)
            .await
            .unwrap(),
        None,
        "ended"
    );
}

async fn only_the_lease_owner_finishes_a_batch_and_its_files_are_recorded(db: &Db) {
    let store = db.store().await;
    let p = project("a");
    inserted(&store, &p, "batch_1", 2, 1, 1_000).await;
    assert!(
        store
            .answer_line(&answer("batch_1", 0, true), None)
            .await
            .unwrap()
            == Answered::Written
    );
    assert!(
        store
            .answer_line(&answer("batch_1", 1, false), None)
            .await
            .unwrap()
            == Answered::Written
    );
    assert!(
        !store
            .finish_batch("batch_1", "a", BatchStatus::Completed, 150, &[])
            .await
            .unwrap(),
        "not finalizing"
    );
    let (_, to) = store
        .take_batch_to_finish(&lease("a", 200), 100)
        .await
        .unwrap()
        .unwrap();
    let mut output = file(&p, "file-out", "batch_output", 10, 150);
    output.filename = "batch_1_output.jsonl".into();
    let mut error = file(&p, "file-err", "batch_output", 20, 150);
    error.filename = "batch_1_error.jsonl".into();
    let files = [error.clone(), output.clone()];
    assert!(
        !store
            .finish_batch("batch_1", "b", to, 150, &files)
            .await
            .unwrap()
    );
    assert_eq!(
        store.file(&p, "file-out").await.unwrap(),
        None,
        "nothing recorded"
    );
    assert!(
        store
            .finish_batch("batch_1", "a", BatchStatus::InProgress, 150, &files)
            .await
            .is_err(),
        "no end"
    );
    assert!(
        store
            .finish_batch("batch_1", "a", to, 150, &files)
            .await
            .unwrap()
    );
    assert!(
        !store
            .finish_batch("batch_1", "a", to, 160, &files)
            .await
            .unwrap(),
        "once"
    );
    let ended = store.batch(Some(&p), "batch_1").await.unwrap().unwrap();
    assert_eq!(ended.status, BatchStatus::Completed);
    assert_eq!(ended.completed_at, Some(150));
    assert_eq!(ended.finalizing_at, Some(100));
    assert_eq!(ended.output_file_id.as_deref(), Some("file-out"));
    assert_eq!(ended.error_file_id.as_deref(), Some("file-err"));
    assert_eq!(store.file(&p, "file-out").await.unwrap(), Some(output));
    assert_eq!(store.file(&p, "file-err").await.unwrap(), Some(error));
    assert_eq!(
        store
            .take_batch_to_finish(&lease("b", 400), 300)
            .await
            .unwrap(),
        None
    );
}

async fn answers_come_in_input_order(db: &Db) {
    let store = db.store().await;
    let p = project("a");
    let record = batch(&p, "batch_1", 12, 1, 1_000);
    // Stored out of order, and past 9 (so not ordered as text).
    let mut input = lines(12);
    input.reverse();
    store
        .insert_batch(&record, &input, &UNBOUNDED)
        .await
        .unwrap()
        .unwrap();
    for (index, ok) in [(11, true), (3, false), (10, true)] {
        assert!(
            store
                .answer_line(&answer("batch_1", index, ok), None)
                .await
                .unwrap()
                == Answered::Written
        );
    }
    let answers = all_answers(&store, "batch_1").await;
    let want: Vec<AnsweredLine> = (0..12)
        .map(|i| AnsweredLine {
            index: i,
            custom_id: format!("req-{i}"),
            answer: match i {
                3 => Some((false, answer("batch_1", 3, false).output)),
                10 | 11 => Some((true, answer("batch_1", i, true).output)),
                _ => None,
            },
        })
        .collect();
    assert_eq!(answers, want);
    assert!(all_answers(&store, "batch_none").await.is_empty());
}

/// A batch ended at `at`, with an input, an output and an error file.
async fn ended(store: &impl BatchStore, p: &ProjectId, id: &str, at: i64) {
    let input = file(p, &format!("file-in-{id}"), "batch", 1, at);
    assert!(store.insert_file(&input, 1_000).await.unwrap());
    inserted(store, p, id, 1, at, 100_000).await;
    assert!(store.answer_line(&answer(id, 0, true), None).await.unwrap() == Answered::Written);
    let (record, to) = store
        .take_batch_to_finish(&lease("a", at + 10), at)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.id, id);
    let files = [
        file(p, &format!("file-out-{id}"), "batch_output", 1, at),
        FileRecord {
            filename: format!("{id}_error.jsonl"),
            ..file(p, &format!("file-err-{id}"), "batch_output", 1, at)
        },
    ];
    assert!(store.finish_batch(id, "a", to, at, &files).await.unwrap());
}

async fn the_sweep_deletes_ended_batches_and_returns_their_files(db: &Db) {
    let store = db.store().await;
    let p = project("a");
    ended(&store, &p, "batch_old", 100).await;
    ended(&store, &p, "batch_new", 1_000).await;
    // Still running, created long ago.
    inserted(&store, &p, "batch_running", 2, 1, 100_000).await;
    // Ended long ago, its input file used by a running batch too.
    let mut shared = batch(&p, "batch_shared_old", 1, 2, 100_000);
    shared.input_file_id = "file-in-batch_running".into();
    store
        .insert_batch(&shared, &lines(1), &UNBOUNDED)
        .await
        .unwrap()
        .unwrap();
    assert!(
        store
            .insert_file(&file(&p, "file-in-batch_running", "batch", 1, 1), 1_000)
            .await
            .unwrap()
    );
    store
        .cancel_batch(&p, "batch_shared_old", 150)
        .await
        .unwrap()
        .unwrap();
    let (_, to) = store
        .take_batch_to_finish(&lease("a", 300), 200)
        .await
        .unwrap()
        .unwrap();
    assert!(
        store
            .finish_batch("batch_shared_old", "a", to, 200, &[])
            .await
            .unwrap()
    );

    let mut swept = store.sweep_batches(500).await.unwrap();
    swept.sort();
    assert_eq!(
        swept,
        [
            "file-err-batch_old",
            "file-in-batch_old",
            "file-out-batch_old"
        ]
    );
    assert_eq!(store.batch(None, "batch_old").await.unwrap(), None);
    assert_eq!(store.batch(None, "batch_shared_old").await.unwrap(), None);
    assert!(all_answers(&store, "batch_old").await.is_empty());
    assert!(all_answers(&store, "batch_shared_old").await.is_empty());
    assert_eq!(
        db.scalar(
            "SELECT COUNT(*) FROM batch_lines WHERE batch_id IN ('batch_old', 'batch_shared_old')"
        )
        .await,
        0
    );
    assert_eq!(store.file(&p, "file-out-batch_old").await.unwrap(), None);
    assert!(
        store
            .file(&p, "file-in-batch_running")
            .await
            .unwrap()
            .is_some(),
        "still used"
    );
    for id in ["batch_new", "batch_running"] {
        assert!(store.batch(None, id).await.unwrap().is_some(), "{id} kept");
    }
    assert_eq!(all_answers(&store, "batch_running").await.len(), 2);
    let kept = store.list_files(&p, None, None, 10).await.unwrap();
    assert_eq!(
        ids_of(&kept),
        [
            "file-out-batch_new",
            "file-in-batch_new",
            "file-err-batch_new",
            "file-in-batch_running"
        ]
    );
    assert!(
        store.sweep_batches(500).await.unwrap().is_empty(),
        "nothing left to sweep"
    );
}

/// `SVC_TEST_BATCH_LINES` lines (5,000 unless set) in one batch, timed.
async fn a_large_batch_is_inserted_at_once(db: &Db) {
    let count: i64 = std::env::var("SVC_TEST_BATCH_LINES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(5_000);
    let store = db.store().await;
    let p = project("a");
    let record = batch(&p, "batch_1", count, 1, 1_000);
    let input = lines(count);
    let started = Instant::now();
    store
        .insert_batch(&record, &input, &UNBOUNDED)
        .await
        .unwrap()
        .unwrap();
    eprintln!(
        "{}: {count} lines inserted in {:?}",
        store.backend(),
        started.elapsed()
    );
    let answers = all_answers(&store, "batch_1").await;
    assert_eq!(answers.len() as i64, count);
    assert_eq!(
        answers[count as usize - 1].custom_id,
        format!("req-{}", count - 1)
    );
    let started = Instant::now();
    let leased = store.lease_lines(&lease("a", 200), 100, 3).await.unwrap();
    eprintln!(
        "{}: 3 of {count} lines leased in {:?}",
        store.backend(),
        started.elapsed()
    );
    assert_eq!(leased[2].line, input[2]);
    // A batch whose lines do not all go in leaves nothing.
    let mut twice = lines(3);
    twice.push(twice[0].clone());
    assert!(
        store
            .insert_batch(&batch(&p, "batch_2", 4, 2, 1_000), &twice, &UNBOUNDED)
            .await
            .is_err()
    );
    assert_eq!(store.batch(None, "batch_2").await.unwrap(), None);
    assert!(all_answers(&store, "batch_2").await.is_empty());
}

async fn concurrent_uploads_never_pass_the_quota_together(db: &Db) {
    let stores = [db.store().await, db.store().await];
    // 16 uploads of 30 bytes (and a name of 14 or 15) at once against 135:
    // three fit, whoever wins.
    for round in 0..5 {
        let p = project(&format!("race{round}"));
        let results = join_all(16, |n| {
            let store = stores[n % 2].clone();
            let p = p.clone();
            async move {
                let id = format!("file-{round}-{n}");
                store
                    .insert_file(&file(&p, &id, "batch", 30, 1), 135)
                    .await
                    .unwrap()
            }
        })
        .await;
        let kept = results.iter().filter(|k| **k).count();
        let listed = stores[0].list_files(&p, None, None, 1_000).await.unwrap();
        assert_eq!(listed.len(), kept);
        assert_eq!(kept, 3, "round {round}: {results:?}");
    }
}

/// The bytes of `lines(count)`'s copy (custom ids and bodies).
fn copy_bytes(count: i64) -> i64 {
    lines(count)
        .iter()
        .map(|l| (l.custom_id.len() + l.body.len()) as i64)
        .sum()
}

async fn answers_count_toward_the_quota_and_one_past_it_is_not_kept(db: &Db) {
    let store = db.store().await;
    let p = project("a");
    assert!(
        store
            .insert_file(&file(&p, "file-in", "batch", 100, 1), 10_000)
            .await
            .unwrap()
    );
    inserted(&store, &p, "batch_1", 3, 1, 1_000).await;
    // The file's bytes and its name's, and the batch's copy of its lines.
    let copy = "file-in.jsonl".len() as i64 + copy_bytes(3);
    assert_eq!(store.stored_bytes(&p).await.unwrap(), 100 + copy);
    let big = |index: i64, len: usize| LineAnswer {
        batch_id: "batch_1".into(),
        index,
        ok: true,
        output: "x".repeat(len),
    };
    let quota = 100 + copy + 1_000;
    assert_eq!(
        store.answer_line(&big(0, 600), Some(quota)).await.unwrap(),
        Answered::Written
    );
    assert_eq!(store.stored_bytes(&p).await.unwrap(), 100 + copy + 600);
    // 600 + 401 > 1,000: nothing is written, the line stays pending.
    assert_eq!(
        store.answer_line(&big(1, 401), Some(quota)).await.unwrap(),
        Answered::PastQuota
    );
    assert_eq!(store.stored_bytes(&p).await.unwrap(), 100 + copy + 600);
    let record = store.batch(None, "batch_1").await.unwrap().unwrap();
    assert_eq!((record.completed, record.failed), (1, 0), "not counted");
    assert_eq!(all_answers(&store, "batch_1").await[1].answer, None);
    // Its error line is kept past the quota; 400 fits.
    let error = LineAnswer {
        ok: false,
        ..big(1, 50)
    };
    assert_eq!(
        store.answer_line(&error, None).await.unwrap(),
        Answered::Written
    );
    assert_eq!(
        store.answer_line(&big(2, 350), Some(quota)).await.unwrap(),
        Answered::Written
    );
    assert_eq!(
        store.stored_bytes(&p).await.unwrap(),
        100 + copy + 1_000,
        "at the quota"
    );
    // An answered line is not answered again, quota or not.
    assert_eq!(
        store.answer_line(&big(2, 1), Some(i64::MAX)).await.unwrap(),
        Answered::Not
    );
    // Uploads see the running batch's bytes: nothing more fits.
    assert!(
        !store
            .insert_file(&file(&p, "file-more", "batch", 1, 2), quota)
            .await
            .unwrap()
    );
    assert_eq!(store.file(&p, "file-more").await.unwrap(), None);
    // Another project's quota is its own.
    assert_eq!(store.stored_bytes(&project("b")).await.unwrap(), 0);
    eprintln!(
        "{}: project at {} of {quota} bytes; a 401-byte answer refused",
        store.backend(),
        store.stored_bytes(&p).await.unwrap()
    );
}

async fn an_ended_batchs_answers_count_once_as_its_files(db: &Db) {
    let store = db.store().await;
    let p = project("a");
    inserted(&store, &p, "batch_1", 2, 1, 1_000).await;
    for index in 0..2 {
        let answer = LineAnswer {
            batch_id: "batch_1".into(),
            index,
            ok: index == 0,
            output: "y".repeat(300),
        };
        assert_eq!(
            store.answer_line(&answer, Some(10_000)).await.unwrap(),
            Answered::Written
        );
    }
    assert_eq!(store.stored_bytes(&p).await.unwrap(), copy_bytes(2) + 600);
    let (_, to) = store
        .take_batch_to_finish(&lease("a", 200), 100)
        .await
        .unwrap()
        .unwrap();
    // The files the runner writes: each answer and a newline.
    let files = [
        FileRecord {
            filename: "batch_1_output.jsonl".into(),
            ..file(&p, "file-out", "batch_output", 301, 150)
        },
        FileRecord {
            filename: "batch_1_error.jsonl".into(),
            ..file(&p, "file-err", "batch_output", 301, 150)
        },
    ];
    assert!(
        store
            .finish_batch("batch_1", "a", to, 150, &files)
            .await
            .unwrap()
    );
    let names = ("batch_1_output.jsonl".len() + "batch_1_error.jsonl".len()) as i64;
    assert_eq!(
        store.stored_bytes(&p).await.unwrap(),
        602 + names,
        "the files, not the answers and the copy besides"
    );
    assert!(
        all_answers(&store, "batch_1").await.is_empty(),
        "its lines are deleted"
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM batch_lines WHERE batch_id = 'batch_1'")
            .await,
        0
    );
    // Deleting the output file frees its bytes.
    assert!(store.delete_file(&p, "file-out").await.unwrap());
    assert_eq!(
        store.stored_bytes(&p).await.unwrap(),
        301 + "batch_1_error.jsonl".len() as i64
    );
}

async fn answers_are_read_in_pages_bounded_in_lines_and_bytes(db: &Db) {
    let store = db.store().await;
    let p = project("a");
    inserted(&store, &p, "batch_1", 10, 1, 1_000).await;
    for (index, len) in [(0, 40), (1, 40), (2, 40), (3, 500), (4, 10), (7, 10)] {
        let answer = LineAnswer {
            batch_id: "batch_1".into(),
            index,
            ok: true,
            output: "z".repeat(len),
        };
        assert_eq!(
            store.answer_line(&answer, None).await.unwrap(),
            Answered::Written
        );
    }
    let indexes = |page: &[AnsweredLine]| page.iter().map(|l| l.index).collect::<Vec<_>>();
    let page = store.answers_page("batch_1", None, 4, 100).await.unwrap();
    assert_eq!(indexes(&page), [0, 1], "40 + 40 fit 100, a third does not");
    let page = store
        .answers_page("batch_1", Some(1), 4, 100)
        .await
        .unwrap();
    assert_eq!(indexes(&page), [2], "40, then 500 does not fit");
    let page = store
        .answers_page("batch_1", Some(2), 4, 100)
        .await
        .unwrap();
    assert_eq!(indexes(&page), [3], "one line however long");
    assert_eq!(page[0].answer, Some((true, "z".repeat(500))));
    let page = store
        .answers_page("batch_1", Some(3), 4, 100)
        .await
        .unwrap();
    assert_eq!(indexes(&page), [4, 5, 6, 7], "at most 4 lines");
    assert_eq!(page[1].answer, None, "pending");
    let page = store
        .answers_page("batch_1", Some(7), 4, 100)
        .await
        .unwrap();
    assert_eq!(indexes(&page), [8, 9]);
    assert!(
        store
            .answers_page("batch_1", Some(9), 4, 100)
            .await
            .unwrap()
            .is_empty()
    );
}

/// Leases one line at a time, answering each at once, as a runner with one
/// place does: the (batch, index) of each, in order.
async fn one_at_a_time(store: &impl BatchStore, count: usize) -> Vec<(String, i64)> {
    let mut order = Vec::new();
    for _ in 0..count {
        let taken = store.lease_lines(&lease("r", 200), 100, 1).await.unwrap();
        let Some(line) = taken.into_iter().next() else {
            break;
        };
        assert_eq!(
            store
                .answer_line(&answer(&line.batch_id, line.line.index, true), None)
                .await
                .unwrap(),
            Answered::Written
        );
        order.push((line.batch_id, line.line.index));
    }
    order
}

async fn projects_take_turns_for_lines(db: &Db) {
    let store = db.store().await;
    let (a, b, c) = (project("a"), project("b"), project("c"));
    inserted(&store, &a, "batch_a", 20, 1, 100_000).await;
    // The first line of a's batch is taken before b's batch exists.
    assert_eq!(one_at_a_time(&store, 1).await, [("batch_a".to_owned(), 0)]);
    inserted(&store, &b, "batch_b", 1, 2, 100_000).await;
    inserted(&store, &c, "batch_c", 3, 3, 100_000).await;
    let order = one_at_a_time(&store, 30).await;
    let at = |id: &str, index: i64| {
        order
            .iter()
            .position(|l| *l == (id.to_owned(), index))
            .unwrap()
    };
    eprintln!(
        "{}: another project's 1-line batch: its line was the {}th taken after a 20-line batch's first",
        store.backend(),
        at("batch_b", 0) + 1
    );
    assert!(
        at("batch_b", 0) < 2,
        "b waits for at most one line of each other project: {order:?}"
    );
    assert!(at("batch_c", 0) < 2, "{order:?}");
    assert!(
        at("batch_c", 2) < 6,
        "c's lines take turns with a's: {order:?}"
    );
    assert_eq!(order.len(), 19 + 1 + 3, "every line once");
    let distinct: HashSet<_> = order.iter().collect();
    assert_eq!(distinct.len(), order.len());
}

async fn a_projects_keys_take_turns_for_lines(db: &Db) {
    let store = db.store().await;
    let p = project("a");
    let (k1, k2) = (KeyId("key_1".into()), KeyId("key_2".into()));
    inserted_as(&store, &p, &k1, "batch_1", 10, 1).await;
    inserted_as(&store, &p, &k1, "batch_2", 10, 2).await;
    inserted_as(&store, &p, &k2, "batch_3", 2, 3).await;
    let order = one_at_a_time(&store, 6).await;
    let batches: Vec<&str> = order.iter().map(|(b, _)| b.as_str()).collect();
    assert_eq!(
        batches,
        [
            "batch_1", "batch_3", "batch_1", "batch_3", "batch_1", "batch_1"
        ],
        "each key in turn; a key's oldest batch first"
    );
}

async fn lines_on_a_live_lease_count_as_their_projects_turns(db: &Db) {
    let store = db.store().await;
    let (a, b) = (project("a"), project("b"));
    inserted(&store, &a, "batch_a", 10, 1, 100_000).await;
    // a has 3 lines running when b's batch comes.
    assert_eq!(leased(&store, "r", 200, 100, 3).await.len(), 3);
    inserted(&store, &b, "batch_b", 10, 2, 100_000).await;
    let taken = leased(&store, "r", 200, 100, 4).await;
    let of_b = taken.iter().filter(|(id, _)| id == "batch_b").count();
    assert_eq!(
        of_b, 4,
        "b catches up with a's 3 running, then wins the tie (served least recently): {taken:?}"
    );
    // Two replicas leasing at once still never share a line.
    let stores = [db.store().await, db.store().await];
    let results = join_all(6, |n| {
        let store = stores[n % 2].clone();
        async move { leased(&store, &format!("replica-{n}"), 200, 100, 3).await }
    })
    .await;
    let all: Vec<_> = results.into_iter().flatten().chain(taken).collect();
    let distinct: HashSet<_> = all.iter().collect();
    assert_eq!(distinct.len(), all.len(), "{all:?}");
}

async fn a_project_has_a_bounded_number_of_batches_in_progress(db: &Db) {
    let store = db.store().await;
    let (p, other) = (project("a"), project("b"));
    let limits = BatchLimits {
        in_progress: 2,
        quota: 1_000_000,
    };
    for id in ["batch_1", "batch_2"] {
        let record = batch(&p, id, 1, 1, 1_000);
        assert_eq!(
            store
                .insert_batch(&record, &lines(1), &limits)
                .await
                .unwrap(),
            Ok(())
        );
    }
    let third = batch(&p, "batch_3", 1, 2, 1_000);
    assert_eq!(
        store
            .insert_batch(&third, &lines(1), &limits)
            .await
            .unwrap(),
        Err(BatchRefused::InProgress { limit: 2 })
    );
    assert_eq!(store.batch(None, "batch_3").await.unwrap(), None);
    assert!(all_answers(&store, "batch_3").await.is_empty());
    // Another project has its own.
    let theirs = batch(&other, "batch_4", 1, 2, 1_000);
    assert_eq!(
        store
            .insert_batch(&theirs, &lines(1), &limits)
            .await
            .unwrap(),
        Ok(())
    );
    // A cancelling batch has not ended; once it has, there is room.
    store.cancel_batch(&p, "batch_1", 5).await.unwrap().unwrap();
    assert!(
        store
            .insert_batch(&third, &lines(1), &limits)
            .await
            .unwrap()
            .is_err()
    );
    let (record, to) = store
        .take_batch_to_finish(&lease("a", 200), 100)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.id, "batch_1");
    assert!(
        store
            .finish_batch("batch_1", "a", to, 100, &[])
            .await
            .unwrap()
    );
    assert_eq!(
        store
            .insert_batch(&third, &lines(1), &limits)
            .await
            .unwrap(),
        Ok(())
    );
}

async fn a_batchs_copy_of_its_lines_counts_toward_the_quota(db: &Db) {
    let store = db.store().await;
    let p = project("a");
    let copy = copy_bytes(50);
    assert!(
        store
            .insert_file(&file(&p, "file-in", "batch", 987, 1), 1_000_000)
            .await
            .unwrap()
    );
    // 987 bytes and a name of 13.
    let limits = BatchLimits {
        in_progress: 100,
        quota: 1_000 + 2 * copy,
    };
    for id in ["batch_1", "batch_2"] {
        assert_eq!(
            store
                .insert_batch(&batch(&p, id, 50, 1, 1_000), &lines(50), &limits)
                .await
                .unwrap(),
            Ok(())
        );
    }
    assert_eq!(store.stored_bytes(&p).await.unwrap(), 1_000 + 2 * copy);
    assert_eq!(
        store
            .insert_batch(&batch(&p, "batch_3", 1, 1, 1_000), &lines(1), &limits)
            .await
            .unwrap(),
        Err(BatchRefused::Quota {
            used: 1_000 + 2 * copy,
            needed: copy_bytes(1),
            quota: 1_000 + 2 * copy,
        })
    );
    assert_eq!(store.batch(None, "batch_3").await.unwrap(), None);
}

async fn concurrent_creates_never_pass_the_bound_together(db: &Db) {
    let stores = [db.store().await, db.store().await];
    // 12 creates at once against a bound of 3: three pass, whoever wins.
    for round in 0..3 {
        let p = project(&format!("race{round}"));
        let results = join_all(12, |n| {
            let store = stores[n % 2].clone();
            let p = p.clone();
            async move {
                let limits = BatchLimits {
                    in_progress: 3,
                    quota: 1_000_000,
                };
                let record = batch(&p, &format!("batch_{round}_{n}"), 2, 1, 1_000);
                store
                    .insert_batch(&record, &lines(2), &limits)
                    .await
                    .unwrap()
            }
        })
        .await;
        let kept = results.iter().filter(|r| r.is_ok()).count();
        assert_eq!(kept, 3, "round {round}: {results:?}");
        let listed = stores[0].list_batches(&p, None, 100).await.unwrap();
        assert_eq!(listed.len(), 3);
    }
}
