//! Budgets of keys and projects: so many prompt and completion tokens, or
//! so much spend (the model's tokens at its configured prices, counted in
//! micro-dollars), per UTC day, week or month (see `svc_core::budget`).
//!
//! Before a request reaches an engine, each budget that applies (the key's,
//! its project's) is charged with an estimate of the request in its unit
//! (its prompt's tokens as the engine counts them, plus `max_tokens`, or
//! [`UNBOUNDED_REPLY_ESTIMATE`] without one, for each of its `n` replies;
//! for spend, at the model's prices), in one atomic step that
//! refuses once the count has reached the budget: in Redis when the server
//! has one (a script), else in the database (a conditional update), so
//! replicas share the count. When the request ends, the difference to its
//! real usage is given back (or added): a request that fails before any
//! token costs nothing. So concurrent requests, on any replica, overspend a
//! budget by at most what their estimates fell short of their usage: one
//! that finds the budget spent, estimates of the requests in flight
//! included, is refused with a 429 `insufficient_quota` naming the reset
//! time. Answers carry the tighter budget's `x-budget-*` headers.
//!
//! As with rate limits, a Redis or database that cannot be reached lets
//! requests through (with a warning): a counter's outage must not become an
//! API outage.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use svc_core::budget::{Budget, BudgetUnit, ModelPrice, Tokens};
use svc_core::{Engine, GenerateRequest, KeyRecord, Store, estimate_tokens, now};

use crate::ratelimit::Redis;

/// The completion tokens charged up front for a request without
/// `max_tokens` (settled with the real count when it ends).
pub const UNBOUNDED_REPLY_ESTIMATE: i64 = 1024;

// Charges `ARGV[2]` unless the count reached `ARGV[1]`; the key lives a
// day past its window (`ARGV[3]`, unix seconds), for late settlements.
const CHARGE: &str = r"
local used = tonumber(redis.call('GET', KEYS[1]) or '0')
if used >= tonumber(ARGV[1]) then return -1 end
used = redis.call('INCRBY', KEYS[1], ARGV[2])
redis.call('EXPIREAT', KEYS[1], ARGV[3])
return used
";

/// A budget and what its current window used ([`Budgets::status`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BudgetReading {
    pub budget: Budget,
    /// Used (or held by requests in flight) in the current window: tokens,
    /// or micro-dollars; `None` when the counter could not be read.
    pub used: Option<i64>,
    /// When the budget renews (unix seconds).
    pub resets_at: i64,
}

/// Where budgets are counted.
#[derive(Clone)]
pub struct Budgets {
    store: Arc<dyn Store>,
    redis: Option<Arc<Redis>>,
    /// Each model's prices, by model id, for spend budgets.
    prices: Arc<BTreeMap<String, ModelPrice>>,
    /// The share of a budget that sets off the alert.
    alert_percent: i64,
}

/// Which budget: a key's or a project's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Key,
    Project,
}

impl Scope {
    fn as_str(self) -> &'static str {
        match self {
            Scope::Key => "key",
            Scope::Project => "project",
        }
    }

    /// The name of the counter of the key or project `id`'s budget in
    /// `unit` (`key:<id>`, `project-usd:<id>`, ...).
    pub fn counter(self, id: &str, unit: BudgetUnit) -> String {
        match unit {
            BudgetUnit::Tokens => format!("{}:{id}", self.as_str()),
            BudgetUnit::Usd => format!("{}-usd:{id}", self.as_str()),
        }
    }
}

/// A spent budget, the tighter if both are: the request is refused (a 429
/// `insufficient_quota` to the client).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spent(pub BudgetState);

/// A budget's state after a request was charged (or refused), for headers
/// and errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BudgetState {
    pub scope: Scope,
    pub unit: BudgetUnit,
    /// Tokens, or micro-dollars.
    pub limit: i64,
    /// What is left in this window, estimates of requests in flight taken.
    pub remaining: i64,
    /// When the budget renews (unix seconds).
    pub resets_at: i64,
}

impl BudgetState {
    /// `x-budget-limit-tokens`, `x-budget-remaining-tokens`,
    /// `x-budget-reset-tokens` (seconds until it renews, as in
    /// `x-ratelimit-reset-*`) and `x-budget-scope`; for a spend budget
    /// `x-budget-limit-usd`, `x-budget-remaining-usd` (dollars) and
    /// `x-budget-reset-usd`; as names and values.
    pub fn headers(&self) -> Vec<(String, String)> {
        let reset = (self.resets_at - now()).max(0);
        let remaining = self.remaining.max(0);
        let [limit_name, remaining_name, reset_name, limit, remaining] = match self.unit {
            BudgetUnit::Tokens => [
                "x-budget-limit-tokens",
                "x-budget-remaining-tokens",
                "x-budget-reset-tokens",
                &self.limit.to_string(),
                &remaining.to_string(),
            ]
            .map(str::to_owned),
            BudgetUnit::Usd => [
                "x-budget-limit-usd",
                "x-budget-remaining-usd",
                "x-budget-reset-usd",
                &dollars(self.limit),
                &dollars(remaining),
            ]
            .map(str::to_owned),
        };
        vec![
            (limit_name, limit),
            (remaining_name, remaining),
            (reset_name, format!("{reset}s")),
            ("x-budget-scope".to_owned(), self.scope.as_str().to_owned()),
        ]
    }

    /// The tighter of two states: the one with the smaller share left
    /// (budgets in different units compare by share).
    fn tighter(a: Option<BudgetState>, b: BudgetState) -> BudgetState {
        let share = |s: &BudgetState| (i128::from(s.remaining), i128::from(s.limit.max(1)));
        match a {
            Some(a) => {
                let ((ar, al), (br, bl)) = (share(&a), share(&b));
                if ar * bl <= br * al { a } else { b }
            }
            None => b,
        }
    }
}

/// Micro-dollars as dollars: `12.5`, `0.000001`.
pub fn dollars(micros: i64) -> String {
    let sign = if micros < 0 { "-" } else { "" };
    let micros = micros.unsigned_abs();
    let text = format!("{sign}{}.{:06}", micros / 1_000_000, micros % 1_000_000);
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// Where a route's answer learns the budget state of its request, for its
/// headers (the charge happens deeper, once the request is parsed).
#[derive(Debug, Clone, Default)]
pub struct BudgetSlot(Arc<Mutex<Option<BudgetState>>>);

impl BudgetSlot {
    fn set(&self, state: BudgetState) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(state);
    }

    /// The state a charge left, if any.
    pub fn take(&self) -> Option<BudgetState> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).take()
    }
}

/// What one request was charged; settled with its real usage by
/// [`Charge::settle`], or with none when dropped unsettled.
pub struct Charge {
    budgets: Budgets,
    parts: Vec<Part>,
}

struct Part {
    scope: String,
    window_start: i64,
    /// What was charged, in `unit`.
    amount: i64,
    unit: BudgetUnit,
    /// The model's prices (for a spend budget's settlement).
    price: Option<ModelPrice>,
}

impl Budgets {
    pub fn new(
        store: Arc<dyn Store>,
        redis: Option<Arc<Redis>>,
        prices: BTreeMap<String, ModelPrice>,
        alert_percent: u8,
    ) -> Self {
        Budgets {
            store,
            redis,
            prices: Arc::new(prices),
            alert_percent: i64::from(alert_percent.clamp(1, 100)),
        }
    }

    /// `model`'s prices, less its `batch_discount` for a batch's line.
    fn price(&self, model: &str) -> Option<ModelPrice> {
        let price = self.prices.get(model)?;
        Some(if crate::scoped::in_batch() {
            price.for_batch()
        } else {
            *price
        })
    }

    /// The share of a budget (percent) that sets off the alert.
    pub fn alert_percent(&self) -> i64 {
        self.alert_percent
    }

    /// Charges the estimate of `request` (for `model`, served by `engine`)
    /// to the budgets of `key` (its own, its project's) and puts the
    /// tighter state in `slot`. `Ok(None)` when no budget applies; a spent
    /// budget is a 429 `insufficient_quota`.
    ///
    /// The estimate is the prompt as the engine counts it (for the embedded
    /// engine: rendered through the chat template with the default system
    /// prompt, and tokenized, off the async workers), plus `max_tokens`
    /// (or [`UNBOUNDED_REPLY_ESTIMATE`]) for each of the `n` replies.
    pub async fn charge(
        &self,
        key: &KeyRecord,
        model: &str,
        request: &GenerateRequest,
        engine: &dyn Engine,
        slot: &BudgetSlot,
    ) -> Result<Option<Charge>, Spent> {
        if key.budget.is_none() && key.project_budget.is_none() {
            return Ok(None);
        }
        let reply = request
            .max_tokens
            .map_or(UNBOUNDED_REPLY_ESTIMATE, i64::from)
            .saturating_mul(i64::from(request.n.max(1)));
        // A prompt the engine cannot count (too long, say) fails in the
        // engine next; until then the plain estimate stands in.
        let prompt = match engine.generator() {
            Some(generator) => generator
                .count_tokens(request)
                .await
                .unwrap_or_else(|_| estimate_tokens(request)),
            None => estimate_tokens(request),
        };
        let prompt = i64::try_from(prompt).unwrap_or(i64::MAX);
        self.charge_tokens(key, model, prompt, reply, slot).await
    }

    /// [`Budgets::charge`] for an estimate already made: `prompt` tokens
    /// in, `reply` tokens out (0 for embeddings).
    pub async fn charge_tokens(
        &self,
        key: &KeyRecord,
        model: &str,
        prompt: i64,
        reply: i64,
        slot: &BudgetSlot,
    ) -> Result<Option<Charge>, Spent> {
        self.charge_usage(key, model, Tokens::new(prompt, reply), slot)
            .await
    }

    /// [`Budgets::charge`] for an estimate of any kind (an audio model's
    /// seconds or characters among it).
    pub async fn charge_usage(
        &self,
        key: &KeyRecord,
        model: &str,
        estimate: Tokens,
        slot: &BudgetSlot,
    ) -> Result<Option<Charge>, Spent> {
        let price = self.price(model);
        self.charge_at(key, estimate, slot, price).await
    }

    /// Charges a reply served from the response cache, which took `saved`
    /// tokens when it was made: free (`Ok(None)`) unless `model` has a
    /// `[prices.<model>] cached_response`; then those tokens count as a
    /// reply's at that price (in spend budgets) and as tokens (in token
    /// budgets), and a spent budget refuses the hit as any request.
    pub async fn charge_cache_hit(
        &self,
        key: &KeyRecord,
        model: &str,
        saved: i64,
        slot: &BudgetSlot,
    ) -> Result<Option<Charge>, Spent> {
        let Some(rate) = self.prices.get(model).and_then(|p| p.cached_response) else {
            return Ok(None);
        };
        let price = ModelPrice {
            output: rate,
            ..ModelPrice::default()
        };
        self.charge_at(key, Tokens::new(0, saved), slot, Some(price))
            .await
    }

    async fn charge_at(
        &self,
        key: &KeyRecord,
        estimate: Tokens,
        slot: &BudgetSlot,
        price: Option<ModelPrice>,
    ) -> Result<Option<Charge>, Spent> {
        let budgets = [
            (Scope::Key, key.budget, &key.budget_holder().0),
            (Scope::Project, key.project_budget, &key.project_id.0),
        ];
        if budgets.iter().all(|(_, b, _)| b.is_none()) {
            return Ok(None);
        }
        let mut charge = Charge {
            budgets: self.clone(),
            parts: Vec::new(),
        };
        let mut tightest = None;
        let at = now();
        for (scope, budget, holder) in budgets {
            let Some(
                budget @ Budget {
                    limit,
                    unit,
                    period,
                },
            ) = budget
            else {
                continue;
            };
            // A model without a price costs nothing: a spend budget, spent
            // or not, does not hold it up.
            if unit == BudgetUnit::Usd && price.is_none() {
                continue;
            }
            let id = scope.counter(holder, unit);
            let estimate = unit.amount(estimate, price).max(1);
            let (window_start, resets_at) = period.window(at);
            let counted = self
                .add(&id, window_start, resets_at, limit, estimate)
                .await;
            let state = |used: i64| BudgetState {
                scope,
                unit,
                limit,
                remaining: limit - used,
                resets_at,
            };
            match counted {
                Counted::Refused(used) => {
                    // Dropping `charge` gives back what was charged so far.
                    return Err(Spent(state(used)));
                }
                Counted::Charged(used) => {
                    let alert_at = limit.saturating_mul(self.alert_percent) / 100;
                    if used >= alert_at && used.saturating_sub(estimate) < alert_at {
                        self.alert(key, scope, &id, budget, (window_start, resets_at), used);
                    }
                    charge.parts.push(Part {
                        scope: id,
                        window_start,
                        amount: estimate,
                        unit,
                        price,
                    });
                    tightest = Some(BudgetState::tighter(tightest, state(used)));
                }
                Counted::Unknown => {}
            }
        }
        if let Some(state) = tightest {
            slot.set(state);
        }
        Ok(Some(charge))
    }

    /// Refuses (a 429 `insufficient_quota`) when a budget of `key` that
    /// applies to `model` is spent, charging nothing: for work that uses
    /// no tokens but must stop once a budget is spent (counting a prompt's
    /// tokens). A count that cannot be read lets it through.
    pub async fn refuse_spent(&self, key: &KeyRecord, model: &str) -> Result<(), Spent> {
        let priced = self.priced(model);
        match self
            .spent(key)
            .await
            .into_iter()
            .find(|spent| spent.0.unit != BudgetUnit::Usd || priced)
        {
            Some(spent) => Err(spent),
            None => Ok(()),
        }
    }

    /// [`Budgets::refuse_spent`] before the request has named its model
    /// (an upload's form may name it after its file): refuses when a
    /// budget that holds every model (of tokens) is spent, and hands back
    /// a spent spend budget, which refuses only a model with a price
    /// ([`Budgets::priced`]), for when the model is known.
    pub async fn refuse_spent_before_model(&self, key: &KeyRecord) -> Result<Option<Spent>, Spent> {
        let spent = self.spent(key).await;
        if let Some(tokens) = spent.iter().find(|s| s.0.unit != BudgetUnit::Usd) {
            return Err(*tokens);
        }
        Ok(spent.into_iter().next())
    }

    /// Whether `model` has a price, so that spend budgets hold it.
    pub fn priced(&self, model: &str) -> bool {
        self.price(model).is_some()
    }

    /// The budgets of `key` (its own, then its project's) whose current
    /// window is spent; one whose count cannot be read is not.
    async fn spent(&self, key: &KeyRecord) -> Vec<Spent> {
        let budgets = [
            (Scope::Key, key.budget, &key.budget_holder().0),
            (Scope::Project, key.project_budget, &key.project_id.0),
        ];
        let mut spent = Vec::new();
        for (scope, budget, holder) in budgets {
            let Some(budget) = budget else { continue };
            let (used, resets_at) = self.used(&scope.counter(holder, budget.unit), budget).await;
            if let Some(used) = used
                && used >= budget.limit
            {
                spent.push(Spent(BudgetState {
                    scope,
                    unit: budget.unit,
                    limit: budget.limit,
                    remaining: budget.limit - used,
                    resets_at,
                }));
            }
        }
        spent
    }

    /// Adds `tokens` to `scope`'s count unless it reached `limit`.
    async fn add(
        &self,
        scope: &str,
        window_start: i64,
        resets_at: i64,
        limit: i64,
        tokens: i64,
    ) -> Counted {
        let counted = match &self.redis {
            Some(redis) => {
                let script = redis::Script::new(CHARGE);
                let mut call = script.key(redis_key(scope, window_start));
                call.arg(limit)
                    .arg(tokens)
                    .arg(resets_at.saturating_add(86_400));
                let charge = |mut conn| async move { call.invoke_async::<i64>(&mut conn).await };
                match redis.call(charge).await {
                    None => return Counted::Unknown,
                    Some(Ok(used)) if used >= 0 => Ok(Counted::Charged(used)),
                    Some(Ok(_)) => Ok(Counted::Refused(
                        self.redis_used(scope, window_start).await.unwrap_or(limit),
                    )),
                    Some(Err(e)) => Err(e.to_string()),
                }
            }
            None => match self
                .store
                .charge_budget(scope, window_start, limit, tokens)
                .await
            {
                Ok(Some(used)) => Ok(Counted::Charged(used)),
                Ok(None) => Ok(Counted::Refused(
                    self.store
                        .budget_used(scope, window_start)
                        .await
                        .unwrap_or(limit),
                )),
                Err(e) => Err(e.to_string()),
            },
        };
        counted.unwrap_or_else(|e| {
            tracing::warn!(error = %e, "budget counter unavailable; letting the request through");
            Counted::Unknown
        })
    }

    /// Writes `budget.threshold_reached` to the audit log for the budget
    /// (of `scope`, counted as `counter`) that `key`'s request took past
    /// its alert percent: once a window, whichever request and replica
    /// gets there first (a marker counted like a budget of one), off the
    /// request's path.
    fn alert(
        &self,
        key: &KeyRecord,
        scope: Scope,
        counter: &str,
        budget: Budget,
        (window_start, resets_at): (i64, i64),
        used: i64,
    ) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (budgets, key, marker) = (self.clone(), key.clone(), format!("alert:{counter}"));
        let id = counter
            .split_once(':')
            .map_or(counter, |(_, id)| id)
            .to_owned();
        #[expect(
            clippy::disallowed_methods,
            reason = "an audit entry must not hold up the request that set it off"
        )]
        runtime.spawn(async move {
            if !matches!(
                budgets.add(&marker, window_start, resets_at, 1, 1).await,
                Counted::Charged(_)
            ) {
                return;
            }
            let store = budgets.store.as_ref();
            let owner = match &key.owner_id {
                Some(user) => store.user_by_id(user).await.ok().flatten(),
                None => None,
            };
            let actor = svc_core::Actor::ApiKey {
                id: key.id.clone(),
                owner: owner.as_ref().map(svc_core::ActorUser::from),
            };
            let mut data = budget.to_json();
            data["scope"] = scope.as_str().into();
            // In the budget's unit: dollars beside `usd`, tokens beside `tokens`.
            data["used"] = match budget.unit {
                BudgetUnit::Tokens => used.into(),
                BudgetUnit::Usd => svc_core::budget::micros_to_usd(used).into(),
            };
            data["alert_percent"] = budgets.alert_percent.into();
            data["resets_at"] = resets_at.into();
            let details = serde_json::json!({"id": id, "data": data});
            let mut entry = svc_core::AuditEntry::new("budget.threshold_reached", &actor, details);
            if let Ok(Some(project)) = store.project_by_id(&key.project_id).await {
                entry = entry.in_project(&project);
            }
            if let Err(e) = svc_core::audit::record(store, entry).await {
                tracing::warn!(error = %e, "cannot write a budget alert to the audit log");
            }
        });
    }

    /// What `budget`'s current window of the counter `scope` (see
    /// [`Scope::counter`]) used, when it can be read, and when it renews.
    pub async fn used(&self, scope: &str, budget: Budget) -> (Option<i64>, i64) {
        let (window_start, resets_at) = budget.period.window(now());
        let used = match &self.redis {
            Some(_) => {
                svc_core::trace::in_span("redis: budget used", self.redis_used(scope, window_start))
                    .await
            }
            None => svc_core::trace::in_span(
                "store: budget used",
                self.store.budget_used(scope, window_start),
            )
            .await
            .ok(),
        };
        (used, resets_at)
    }

    /// The key or project `id`'s budget as shown: with its current
    /// window's count (`None` when it could not be read) and when it
    /// renews; `None` without a budget.
    pub async fn status(
        &self,
        scope: Scope,
        id: &str,
        budget: Option<Budget>,
    ) -> Option<BudgetReading> {
        let budget = budget?;
        let (used, resets_at) = self.used(&scope.counter(id, budget.unit), budget).await;
        Some(BudgetReading {
            budget,
            used,
            resets_at,
        })
    }

    async fn redis_used(&self, scope: &str, window_start: i64) -> Option<i64> {
        let redis = self.redis.as_ref()?;
        let mut get = redis::cmd("GET");
        get.arg(redis_key(scope, window_start));
        let read = |mut conn| async move { get.query_async::<Option<i64>>(&mut conn).await };
        match redis.call(read).await {
            Some(Ok(used)) => Some(used.unwrap_or(0)),
            _ => None,
        }
    }

    /// Adds `delta` to `scope`'s count of the window at `window_start`.
    async fn adjust(&self, scope: &str, window_start: i64, delta: i64) {
        if delta == 0 {
            return;
        }
        let result = match &self.redis {
            Some(redis) => {
                let mut incr = redis::cmd("INCRBY");
                incr.arg(redis_key(scope, window_start)).arg(delta);
                let add = |mut conn| async move { incr.query_async::<i64>(&mut conn).await };
                match redis.call(add).await {
                    Some(result) => result.map(|_| ()).map_err(|e| e.to_string()),
                    None => {
                        Err("Redis is being left alone after a failure, or not reached yet".into())
                    }
                }
            }
            None => self
                .store
                .adjust_budget(scope, window_start, delta)
                .await
                .map_err(|e| e.to_string()),
        };
        if let Err(e) = result {
            tracing::warn!(error = %e, scope, delta, "settling a budget failed");
        }
    }
}

/// What charging one budget found.
enum Counted {
    /// Charged; the count after.
    Charged(i64),
    /// Spent: the count, which had reached the budget.
    Refused(i64),
    /// The counter could not be reached: not counted.
    Unknown,
}

impl Charge {
    /// Settles the charge with the request's real usage: gives back what
    /// the estimate was over, or adds what it was under. Off the response's
    /// path, on a task of its own.
    pub fn settle(mut self, used: Tokens) {
        self.settle_once(used);
    }

    /// What [`Charge::settle`] does, once: the parts go with the first call.
    fn settle_once(&mut self, used: Tokens) {
        let parts = std::mem::take(&mut self.parts);
        if parts.is_empty() {
            return;
        }
        let budgets = self.budgets.clone();
        // Outside a runtime (never in the server) there is nowhere to count.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            #[expect(
                clippy::disallowed_methods,
                reason = "a reply's end (a drop) cannot wait for the counter; a settlement lost at shutdown leaves one estimate charged"
            )]
            runtime.spawn(async move {
                for part in parts {
                    let used = part.unit.amount(used, part.price);
                    budgets
                        .adjust(&part.scope, part.window_start, used - part.amount)
                        .await;
                }
            });
        }
    }
}

/// Unsettled, a request used nothing: its estimate is given back.
impl Drop for Charge {
    fn drop(&mut self) {
        self.settle_once(Tokens::default());
    }
}

fn redis_key(scope: &str, window_start: i64) -> String {
    format!("svc:budget:{{{scope}}}:{window_start}")
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use svc_core::BudgetPeriod;

    use super::*;

    fn tokens(limit: i64) -> Budget {
        Budget {
            limit,
            unit: BudgetUnit::Tokens,
            period: BudgetPeriod::Day,
        }
    }

    fn key(budget: Option<Budget>, project_budget: Option<Budget>) -> KeyRecord {
        KeyRecord {
            budget,
            project_budget,
            ..crate::fixtures::key("key_budget")
        }
    }

    /// Budgets counted in an in-memory store; `priced` costs $10 a million
    /// prompt tokens and $30 a million completion tokens.
    async fn budgets() -> Budgets {
        let store = svc_store::SqlStore::connect("sqlite::memory:")
            .await
            .unwrap();
        let price = ModelPrice {
            input: 10.0,
            output: 30.0,
            ..ModelPrice::default()
        };
        let prices = BTreeMap::from([("priced".to_owned(), price)]);
        Budgets::new(Arc::new(store), None, prices, 80)
    }

    /// Charges `prompt` and `completion` tokens of `model` to `key`: the
    /// charge (or the refusal) and the tighter state.
    async fn charge(
        budgets: &Budgets,
        key: &KeyRecord,
        model: &str,
        prompt: i64,
        completion: i64,
    ) -> (Result<Option<Charge>, Spent>, Option<BudgetState>) {
        let slot = BudgetSlot::default();
        let charged = budgets
            .charge_tokens(key, model, prompt, completion, &slot)
            .await;
        (charged, slot.take())
    }

    /// What `key`'s own budget used, once it reads `expected` (a settlement
    /// or a charge given back is counted off the caller's task).
    async fn used_becomes(budgets: &Budgets, key: &KeyRecord, expected: i64) -> Option<i64> {
        let mut used = None;
        for _ in 0..200 {
            let reading = budgets
                .status(Scope::Key, &key.budget_holder().0, key.budget)
                .await
                .unwrap();
            used = reading.used;
            if used == Some(expected) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        used
    }

    #[tokio::test]
    async fn a_key_without_budgets_is_charged_nothing() {
        let budgets = budgets().await;
        let (charged, state) = charge(&budgets, &key(None, None), "m", 100, 100).await;
        assert!(matches!(charged, Ok(None)));
        assert_eq!(state, None);
    }

    #[tokio::test]
    async fn the_tighter_of_the_keys_and_its_projects_budgets_is_reported() {
        let budgets = budgets().await;
        let key = key(Some(tokens(100)), Some(tokens(50)));
        let (charged, state) = charge(&budgets, &key, "m", 20, 10).await;
        assert!(matches!(charged, Ok(Some(_))));
        let state = state.unwrap();
        assert_eq!(
            (state.scope, state.limit, state.remaining),
            (Scope::Project, 50, 20)
        );
        assert_eq!(used_becomes(&budgets, &key, 30).await, Some(30));
    }

    #[tokio::test]
    async fn a_spend_budget_counts_priced_models_only() {
        let budgets = budgets().await;
        let dollar = Budget {
            limit: 1_000_000,
            unit: BudgetUnit::Usd,
            period: BudgetPeriod::Month,
        };
        let key = key(Some(dollar), None);
        // 1,000 prompt tokens at $10/M and 1,000 completion at $30/M: 4 cents.
        let (_held, state) = charge(&budgets, &key, "priced", 1000, 1000).await;
        assert_eq!(state.unwrap().remaining, 960_000);
        // A model without a price costs nothing: no state, nothing counted.
        let (charged, state) = charge(&budgets, &key, "free", 1000, 1000).await;
        assert!(charged.is_ok());
        assert_eq!(state, None);
        assert!(budgets.priced("priced") && !budgets.priced("free"));
        assert_eq!(used_becomes(&budgets, &key, 40_000).await, Some(40_000));
    }

    #[tokio::test]
    async fn a_settled_charge_counts_its_usage_and_a_dropped_one_gives_back() {
        let budgets = budgets().await;
        let key = key(Some(tokens(100)), None);
        let (charged, _) = charge(&budgets, &key, "m", 30, 10).await;
        assert_eq!(used_becomes(&budgets, &key, 40).await, Some(40));
        charged.unwrap().unwrap().settle(Tokens::new(5, 2));
        assert_eq!(used_becomes(&budgets, &key, 7).await, Some(7));
        let (charged, _) = charge(&budgets, &key, "m", 30, 10).await;
        drop(charged);
        assert_eq!(used_becomes(&budgets, &key, 7).await, Some(7));
    }

    #[tokio::test]
    async fn a_spent_budget_refuses_and_refusing_charges_nothing() {
        let budgets = budgets().await;
        let key = key(Some(tokens(10)), None);
        // Not yet spent: admitted, though its estimate passes the limit.
        let (charged, state) = charge(&budgets, &key, "m", 20, 10).await;
        let _held = charged.unwrap();
        assert_eq!(state.unwrap().remaining, -20);
        let (refused, _) = charge(&budgets, &key, "m", 1, 0).await;
        let Err(Spent(state)) = refused else {
            panic!("a spent budget admitted a request");
        };
        assert_eq!((state.scope, state.remaining), (Scope::Key, -20));
        assert!(budgets.refuse_spent(&key, "m").await.is_err());
        assert_eq!(used_becomes(&budgets, &key, 30).await, Some(30));
    }

    #[tokio::test]
    async fn a_cached_reply_is_free_without_a_cached_response_price() {
        let budgets = budgets().await;
        let key = key(Some(tokens(100)), None);
        let slot = BudgetSlot::default();
        let hit = budgets
            .charge_cache_hit(&key, "priced", 50, &slot)
            .await
            .unwrap();
        assert!(hit.is_none());
        assert_eq!(slot.take(), None);
        assert_eq!(used_becomes(&budgets, &key, 0).await, Some(0));
    }
}
