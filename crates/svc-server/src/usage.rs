//! Usage accounting: every completion that reaches an engine adds one
//! request and its tokens to its key's counters for the day, and its tokens
//! to the key's rate-limit window.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use futures::StreamExt;
use svc_core::{
    EngineEvent, EventStream, KeyId, Store, TokenUsage, Tokens, UsageDelta, day_of, now,
};

use crate::budget::{BudgetSlot, Charge};
use crate::metrics::Metrics;
use crate::ratelimit::RateLimiter;

/// How a generating request is metered: whether its tokens count toward
/// the key's tokens-per-minute limit, and where the state of its budgets
/// goes once charged (for the answer's headers).
#[derive(Debug, Clone, Default)]
pub struct Metering {
    pub count_tokens: bool,
    pub budget: BudgetSlot,
    /// How the request's generations went (any error, their tokens), for
    /// the response cache; shared by the prompts of one request. Watched
    /// only while the cache is on.
    pub outcome: Arc<Watch>,
}

/// How a generation went, as its events pass: whether one was an error,
/// and the tokens it used (what a hit of its reply in the response cache
/// saves).
#[derive(Debug, Default)]
pub struct Watch {
    pub failed: AtomicBool,
    pub tokens: AtomicU64,
}

impl Watch {
    pub fn on(&self, event: &Result<EngineEvent, svc_core::EngineError>) {
        match event {
            Ok(EngineEvent::Finish { usage, .. }) => {
                self.tokens.fetch_add(
                    usage.prompt_tokens.saturating_add(usage.completion_tokens),
                    Ordering::Relaxed,
                );
            }
            Ok(_) => {}
            Err(_) => self.failed.store(true, Ordering::Relaxed),
        }
    }
}

/// Where a request's usage goes: the day's counters, the key's
/// tokens-per-minute window (when its tokens count toward one), and the
/// metrics.
pub struct Meters<'a> {
    pub ledger: &'a Arc<Ledger>,
    pub limiter: Option<&'a RateLimiter>,
    pub metrics: &'a Arc<Metrics>,
}

/// Whom a generation's usage goes to, and how.
pub struct Bill {
    pub key_id: KeyId,
    /// The replies asked for (`n`): usage is theirs together.
    pub choices: u32,
    /// What its budgets were charged up front, to settle.
    pub charge: Option<Charge>,
    /// Its prompt's tokens, estimated: what a request left before any
    /// reply finished (and so reported its prompt) counts.
    pub prompt_tokens: u64,
}

/// Passes `events` through unchanged and records usage once, for the
/// whole request: with the tokens of its `choices` `Finish` events (one per
/// reply of a request with `n` replies) summed. When the stream fails or is
/// dropped (the client went away) first, the replies that finished count
/// their tokens and the others a token per piece they sent (and, when no
/// reply finished, the prompt as [`Bill::prompt_tokens`] estimates it): a
/// reply left before its end is work done, not free. A request that sent
/// nothing costs nothing. The write happens on a task of its own, off the
/// response's path. Also reports time to first token and tokens to the
/// metrics.
pub fn metered(
    events: EventStream,
    meters: Meters<'_>,
    model: &str,
    arrived: Instant,
    bill: Bill,
) -> EventStream {
    let logged = crate::request_log::current();
    if let Some(row) = &logged {
        row.note(|row| row.model = Some(model.to_owned()));
    }
    let mut meter = Meter {
        logged: logged.clone(),
        ledger: meters.ledger.clone(),
        limiter: meters.limiter.cloned(),
        charge: bill.charge,
        key_id: bill.key_id,
        model: model.to_owned(),
        choices_left: bill.choices.max(1),
        used: TokenUsage::default(),
        prompt_estimate: bill.prompt_tokens,
        choice: 0,
        pieces: Vec::new(),
        recorded: false,
    };
    let metrics = meters.metrics.clone();
    let model = model.to_owned();
    let mut first = true;
    events
        .inspect(move |event| {
            if std::mem::take(&mut first) && event.is_ok() {
                metrics.time_to_first_token(&model, arrived.elapsed());
                if let Some(row) = &logged {
                    row.first_token();
                }
            }
            match event {
                Ok(EngineEvent::Finish { usage, .. }) => {
                    metrics.tokens(&model, usage);
                    meter.finished(*usage);
                }
                Err(error) => {
                    if let Some(row) = &meter.logged {
                        // The answer began (200); its failure is the row's.
                        let kind = crate::request_log::failure_type(error);
                        row.note(|row| row.error_type = Some(kind.to_owned()));
                    }
                    meter.record();
                }
                Ok(EngineEvent::Choice(index)) => meter.choice = *index,
                Ok(EngineEvent::Text(_) | EngineEvent::Reasoning(_) | EngineEvent::ToolCall(_)) => {
                    meter.piece();
                }
                Ok(EngineEvent::Logprobs(_) | EngineEvent::PromptLogprobs(_)) => {}
            }
        })
        .boxed()
}

struct Meter {
    /// The request log's row of the request, when it is logged.
    logged: Option<Arc<crate::request_log::Pending>>,
    ledger: Arc<Ledger>,
    /// Where to count the tokens, when the key has a tokens-per-minute limit.
    limiter: Option<RateLimiter>,
    /// What the request's budgets were charged up front, settled here.
    charge: Option<Charge>,
    key_id: KeyId,
    model: String,
    /// Replies still to finish.
    choices_left: u32,
    /// The tokens of the replies finished so far.
    used: TokenUsage,
    /// The prompt's tokens, estimated (see [`Bill::prompt_tokens`]).
    prompt_estimate: u64,
    /// The reply the events are of now.
    choice: u32,
    /// Pieces sent by each reply not finished yet, by index (`None` once
    /// it finished).
    pieces: Vec<Option<u64>>,
    recorded: bool,
}

impl Meter {
    /// The current reply's place among `pieces`.
    fn current(&mut self) -> &mut Option<u64> {
        let index = self.choice as usize;
        if self.pieces.len() <= index {
            self.pieces.resize(index + 1, Some(0));
        }
        &mut self.pieces[index]
    }

    /// The current reply sent a piece (text, reasoning, a tool call's).
    fn piece(&mut self) {
        if let Some(pieces) = self.current() {
            *pieces = pieces.saturating_add(1);
        }
    }

    /// One reply finished with `usage`; the last one records the request.
    fn finished(&mut self, usage: TokenUsage) {
        *self.current() = None;
        self.used.add(usage);
        self.choices_left = self.choices_left.saturating_sub(1);
        if self.choices_left == 0 {
            self.record();
        }
    }

    /// Records the request: the tokens of the replies finished so far, and
    /// those the others sent (see [`metered`]).
    fn record(&mut self) {
        if std::mem::replace(&mut self.recorded, true) {
            return;
        }
        let unfinished: u64 = self.pieces.iter().flatten().sum();
        let mut used = self.used;
        if unfinished > 0 {
            used.completion_tokens = used.completion_tokens.saturating_add(unfinished);
            if used.prompt_tokens == 0 {
                used.prompt_tokens = self.prompt_estimate;
            }
        }
        account(
            &self.ledger,
            self.limiter.as_ref(),
            &self.key_id,
            &self.model,
            self.charge.take(),
            used,
            self.logged.as_deref(),
        );
    }
}

/// Records one request of `key_id` to `model` that used `used`: usage for
/// the day, the settlement of its budgets' `charge`, and (with a `limiter`)
/// its tokens toward the key's tokens-per-minute limit.
fn account(
    ledger: &Ledger,
    limiter: Option<&RateLimiter>,
    key_id: &KeyId,
    model: &str,
    charge: Option<Charge>,
    used: TokenUsage,
    logged: Option<&crate::request_log::Pending>,
) {
    let count = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let tokens = Tokens {
        prompt: count(used.prompt_tokens),
        cached: count(used.cached_tokens),
        completion: count(used.completion_tokens),
        audio_seconds: count(used.audio_seconds),
        characters: count(used.characters),
    };
    if let Some(row) = logged {
        row.tokens(tokens);
    }
    ledger.add(
        key_id,
        model,
        now().div_euclid(SECONDS_PER_DAY),
        Counts {
            requests: 1,
            tokens,
            ..Counts::default()
        },
    );
    if let Some(charge) = charge {
        charge.settle(tokens);
    }
    let total = tokens.prompt.saturating_add(tokens.completion);
    let Some(limiter) = limiter.cloned() else {
        return;
    };
    // Outside a runtime (never in the server) there is nowhere to count.
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        let key_id = key_id.clone();
        #[expect(
            clippy::disallowed_methods,
            reason = "a reply's end (a drop) cannot wait for Redis; a count lost at shutdown only lets one reply's tokens past the limit"
        )]
        runtime.spawn(async move {
            limiter.add_tokens(&key_id, total).await;
        });
    }
}

/// Records a request answered in one piece (embeddings): its usage, its
/// budgets settled, its tokens toward the key's limit when `metering`
/// counts them, and its tokens in the metrics.
pub fn record_whole(
    meters: Meters<'_>,
    key_id: &KeyId,
    model: &str,
    charge: Option<Charge>,
    used: TokenUsage,
) {
    meters.metrics.tokens(model, &used);
    let logged = crate::request_log::current();
    if let Some(row) = &logged {
        row.note(|row| row.model = Some(model.to_owned()));
    }
    account(
        meters.ledger,
        meters.limiter,
        key_id,
        model,
        charge,
        used,
        logged.as_deref(),
    );
}

/// Records a request answered from the response cache: one request of
/// `model` that used no tokens and saved `saved` (what its reply took when
/// it was made), and the settlement of the budgets' `charge` for it (at
/// `[prices.<model>] cached_response`, when set).
pub fn record_cache_hit(
    ledger: &Ledger,
    key_id: &KeyId,
    model: &str,
    saved: u64,
    charge: Option<Charge>,
) {
    let saved = i64::try_from(saved).unwrap_or(i64::MAX);
    ledger.add(
        key_id,
        model,
        now().div_euclid(SECONDS_PER_DAY),
        Counts {
            requests: 1,
            cache_hits: 1,
            cache_saved_tokens: saved,
            ..Counts::default()
        },
    );
    if let Some(charge) = charge {
        // Charged as if the saved tokens were the reply's, at the price
        // the charge was made with (`cached_response`).
        charge.settle(Tokens::new(0, saved));
    }
}

impl Drop for Meter {
    fn drop(&mut self) {
        self.record();
    }
}

/// Usage not yet written: summed per key, model and day in memory and
/// written once a second (and at shutdown) in one upsert per key, model and
/// day, so the database sees a handful of writes per second however many
/// requests there are. A crash loses at most the last second's counts.
#[derive(Default)]
pub struct Ledger {
    /// By UTC day (days since the epoch: the date is only written out when
    /// flushing, off the requests' path), then key and model.
    pending: std::sync::Mutex<HashMap<i64, DayCounts>>,
}

/// One day's counts not yet written, by key and model.
type DayCounts = HashMap<(KeyId, String), Counts>;

/// One key's counts for one day, not yet written.
#[derive(Debug, Clone, Copy, Default)]
struct Counts {
    requests: i64,
    tokens: Tokens,
    /// Replies from the response cache, and the tokens they saved.
    cache_hits: i64,
    cache_saved_tokens: i64,
}

impl Counts {
    fn add(&mut self, other: Counts) {
        self.requests = self.requests.saturating_add(other.requests);
        self.tokens.add(other.tokens);
        self.cache_hits = self.cache_hits.saturating_add(other.cache_hits);
        self.cache_saved_tokens = self
            .cache_saved_tokens
            .saturating_add(other.cache_saved_tokens);
    }
}

const SECONDS_PER_DAY: i64 = 86_400;

/// How often the ledger is written.
pub const FLUSH_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

impl Ledger {
    /// Adds `counts` to `key_id`'s of `model` and `day` (days since the
    /// epoch, UTC).
    fn add(&self, key_id: &KeyId, model: &str, day: i64, counts: Counts) {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        pending
            .entry(day)
            .or_default()
            .entry((key_id.clone(), model.to_owned()))
            .or_default()
            .add(counts);
    }

    /// The requests and tokens pending for `key_id` and `model`, over
    /// every day.
    #[cfg(test)]
    pub(crate) fn counted(&self, key_id: &KeyId, model: &str) -> (i64, Tokens) {
        let pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let mut total = Counts::default();
        for counts in pending
            .values()
            .filter_map(|day| day.get(&(key_id.clone(), model.to_owned())))
        {
            total.add(*counts);
        }
        (total.requests, total.tokens)
    }

    /// Writes what is pending; what fails to write is kept for next time.
    pub async fn flush(&self, store: &dyn Store) {
        let pending: Vec<(i64, DayCounts)> = {
            let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            pending.drain().collect()
        };
        let pending = pending
            .into_iter()
            .flat_map(|(day, keys)| keys.into_iter().map(move |(key, c)| (key, day, c)));
        for ((key_id, model), day, counts) in pending {
            let delta = UsageDelta {
                key_id,
                model,
                day: day_of(day * SECONDS_PER_DAY),
                requests: counts.requests,
                prompt_tokens: counts.tokens.prompt,
                cached_tokens: counts.tokens.cached,
                completion_tokens: counts.tokens.completion,
                cache_hits: counts.cache_hits,
                cache_saved_tokens: counts.cache_saved_tokens,
                audio_seconds: counts.tokens.audio_seconds,
                characters: counts.tokens.characters,
            };
            if let Err(e) = store.add_usage(&delta).await {
                tracing::warn!(error = %e, key = %delta.key_id, "recording usage failed; will retry");
                self.add(&delta.key_id, &delta.model, day, counts);
            }
        }
    }

    /// Flushes every [`FLUSH_EVERY`] until `stop`, then once more.
    pub async fn run(
        self: Arc<Self>,
        store: Arc<dyn Store>,
        stop: tokio_util::sync::CancellationToken,
    ) {
        loop {
            tokio::select! {
                () = tokio::time::sleep(FLUSH_EVERY) => self.flush(&*store).await,
                () = stop.cancelled() => break,
            }
        }
        self.flush(&*store).await;
    }
}
