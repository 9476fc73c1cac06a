//! The one admission path every endpoint's work goes through, whatever its
//! dialect and whether it came over the network or from a batch: the key's
//! rate limits ([`Admission::limit`]), the model's route (the key may use
//! it; its reasoning flag and default system prompt), its budgets charged
//! up front, the engine, the fallbacks when the engine fails before its
//! first event ([`Admission::generate_with`]), and the usage metered and
//! settled as the events pass (see [`crate::usage`]). A reply served from
//! the response cache is charged and counted here too
//! ([`Admission::cache_hit`]), and work answered in one piece (embeddings,
//! rerank, audio) is routed, charged and recorded by the same parts
//! ([`Admission::whole`]).
//!
//! It knows nothing of HTTP: what refuses a request is a [`Refusal`],
//! plain data that the HTTP edge (`crate::error`) turns into a status and
//! a body in the dialect's shape, and the limits' and budgets' states are
//! handed back for the edge to put in headers.

use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;
use svc_core::{
    Capability, ChatMessage, Engine, EngineError, EventStream, GenerateRequest, KeyRecord,
    ReasoningEffort, TokenUsage, Tokens,
};

use crate::budget::{BudgetSlot, Budgets, Spent};
use crate::metrics::Metrics;
use crate::ratelimit::{RateLimiter, Verdict};
use crate::registry::{ModelRegistry, ModelRoute};
use crate::usage::{Bill, Ledger, Metering};

/// Why admission refused a request (or its engine failed before it was
/// under way).
#[derive(Debug, Clone)]
pub enum Refusal {
    /// A per-minute limit of the key is reached.
    RateLimited(Verdict),
    /// A budget of the key or its project is spent.
    Spent(Spent),
    /// The model is not served, or not one the key may use (answered
    /// alike, so a key cannot learn what else is served).
    ModelNotFound(String),
    /// The engine (the last one tried) failed to start the work.
    Engine(EngineError),
}

impl From<Spent> for Refusal {
    fn from(spent: Spent) -> Self {
        Refusal::Spent(spent)
    }
}

/// An upload admitted for its key ([`Admission::admit_upload`]), waiting
/// for the model its form names.
pub struct UploadGate {
    models: Arc<ModelRegistry>,
    /// What the model must do with the upload.
    capability: Capability,
    budgets: Budgets,
    key: KeyRecord,
    /// A spend budget found spent: it refuses a model with a price.
    spent_spend: Option<Spent>,
}

impl UploadGate {
    /// Refuses `model` as the admission of the work would, before the
    /// upload's file is written (or while it is): a model the key may not
    /// use is one that does not exist ([`Admission::usable`]), one that
    /// cannot do the work is refused as [`Admission::serving`] refuses it,
    /// and a spent spend budget refuses a model with a price.
    pub fn model(&self, model: &str) -> Result<(), Refusal> {
        let Some(route) = self.models.get(model).filter(|_| self.key.may_use(model)) else {
            return Err(Refusal::ModelNotFound(model.to_owned()));
        };
        if !route.engine.offers(self.capability) {
            return Err(Refusal::Engine(
                route.engine.refusal(model, self.capability),
            ));
        }
        match self.spent_spend {
            Some(spent) if self.budgets.priced(model) => Err(Refusal::Spent(spent)),
            _ => Ok(()),
        }
    }
}

impl std::fmt::Debug for UploadGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UploadGate")
            .field("key", &self.key.id)
            .field("spent_spend", &self.spent_spend)
            .finish_non_exhaustive()
    }
}

/// Work answered in one piece, as [`Admission::whole`] is asked for it.
pub struct Asked<'a> {
    pub key: &'a KeyRecord,
    /// The model id asked for.
    pub model: &'a str,
    /// What the model must do.
    pub capability: Capability,
    pub metering: &'a Metering,
    /// When the request arrived, for the gateway's overhead.
    pub arrived: Instant,
    /// What it is expected to use, charged up front.
    pub estimate: Tokens,
}

/// Who work answered in one piece is for, as its engine request says it
/// (`client`, `background`: an engine that queues shares its capacity by
/// client and runs a batch's lines after interactive work).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// The key's id.
    pub client: String,
    /// Whether it is a batch's line.
    pub background: bool,
}

/// A generation under way: its events, and the model serving it (the one
/// asked for, or one of its fallbacks).
pub struct Generated {
    pub events: EventStream,
    pub model: String,
}

/// The parts admission decides with, shared by every endpoint.
pub struct Admission {
    /// Model ids and the engines that serve them.
    pub models: Arc<ModelRegistry>,
    /// Per-key requests and tokens per minute.
    pub limiter: RateLimiter,
    /// Token and spend budgets of keys and projects.
    pub budgets: Budgets,
    /// Usage waiting to be written.
    pub ledger: Arc<Ledger>,
    /// Gateway overhead, time to first token and tokens, by model.
    pub metrics: Arc<Metrics>,
    /// Whether generations' outcomes are watched (for the response cache).
    pub watch_outcomes: bool,
}

impl Admission {
    /// Counts a request against `key`'s per-minute limits (so failed
    /// requests count too). `Ok(None)`: the key has none, or this is a
    /// batch's line, which keeps the batch's own pace; `Ok(Some(verdict))`:
    /// admitted, with the limits' state for the answer's headers.
    pub async fn limit(&self, key: &KeyRecord) -> Result<Option<Verdict>, Refusal> {
        if crate::scoped::in_batch() {
            return Ok(None);
        }
        match self.limiter.check(key).await {
            Some(v) if v.exceeded.is_some() => Err(Refusal::RateLimited(v)),
            verdict => Ok(verdict),
        }
    }

    /// `model`'s route when the key may use it (by its own list and its
    /// project's); otherwise the model is answered as one that does not
    /// exist, so a key cannot learn what else is served.
    pub fn usable(&self, key: &KeyRecord, model: &str) -> Result<&ModelRoute, Refusal> {
        self.models
            .get(model)
            .filter(|_| key.may_use(model))
            .ok_or_else(|| Refusal::ModelNotFound(model.to_owned()))
    }

    /// `model`'s route when the key may use it ([`Admission::usable`])
    /// and its engine offers `capability`; otherwise the engine's refusal
    /// ([`Engine::refusal`]), the same on every endpoint.
    pub fn serving(
        &self,
        key: &KeyRecord,
        model: &str,
        capability: Capability,
    ) -> Result<&ModelRoute, Refusal> {
        let route = self.usable(key, model)?;
        if route.engine.offers(capability) {
            Ok(route)
        } else {
            Err(Refusal::Engine(route.engine.refusal(model, capability)))
        }
    }

    /// Admits an upload for work of `capability` before a byte of it is
    /// kept: what holds whatever the model (the key's rate limits are
    /// counted before, by the route) — a spent budget of tokens refuses it
    /// here. The model, which a form names in a field of its own, perhaps
    /// after its file, is checked by the [`UploadGate`] as soon as that
    /// field is read.
    pub async fn admit_upload(
        &self,
        key: &KeyRecord,
        capability: Capability,
    ) -> Result<UploadGate, Refusal> {
        let spent_spend = self.budgets.refuse_spent_before_model(key).await?;
        Ok(UploadGate {
            models: self.models.clone(),
            capability,
            budgets: self.budgets.clone(),
            key: key.clone(),
            spent_spend,
        })
    }

    /// `model`'s route, with what it sets applied to `request`: whether it
    /// reasons ([`reasons`], from the model's reasoning flag and the
    /// request's effort), and its default system prompt when the request
    /// has none (neither for a legacy text prompt, which is continued as it
    /// is). A model the key may not use is one that does not exist.
    pub fn routed(
        &self,
        key: &KeyRecord,
        model: &str,
        request: &mut GenerateRequest,
    ) -> Result<&ModelRoute, Refusal> {
        let route = self.usable(key, model)?;
        if request.prompt.is_some() {
            // A text prompt is continued as it is: no system prompt, no reasoning.
            return Ok(route);
        }
        request.reasoning = reasons(route.reasoning, request.reasoning_effort);
        if let Some(prompt) = &route.default_system_prompt
            && !request
                .messages
                .iter()
                .any(|m| matches!(m, ChatMessage::System(_)))
        {
            request
                .messages
                .insert(0, ChatMessage::System(prompt.clone()));
        }
        Ok(route)
    }

    /// The `system_fingerprint` of `model`'s engine, when it has one.
    pub fn fingerprint(&self, model: &str) -> Option<String> {
        self.models.get(model)?.engine.fingerprint()
    }

    /// Routes a validated request to `model`'s engine and meters its
    /// events (see [`Admission::generate_with`]).
    pub async fn generate(
        &self,
        key: &KeyRecord,
        model: &str,
        request: GenerateRequest,
        arrived: Instant,
        metering: Metering,
    ) -> Result<Generated, Refusal> {
        self.generate_with(key, model, request, arrived, metering, |_, _| {
            |events| events
        })
        .await
    }

    /// Routes a validated request to `model`'s engine: the model's
    /// reasoning flag and default system prompt apply, the gateway's
    /// overhead is recorded, the key's and its project's budgets are
    /// charged, and the events are metered into usage, budgets (and the
    /// key's token limits when `metering` says so). `wrap` is applied to
    /// the engine's events before they are metered (so what it changes,
    /// such as an earlier end, is what usage records); it is called with
    /// the serving engine and the request as that engine got it, before
    /// its events are read.
    ///
    /// Fallbacks (`[models.<id>] fallbacks`): when `model` fails before
    /// its first event (its engine refuses or fails to start, or its
    /// stream's first item is an error) with a failure of the engine's
    /// (unavailable, overloaded, a bad or slow gateway, an internal error;
    /// a prompt past its context too, when the model says so), the next
    /// model in its list that the key may use is asked the same, charged
    /// and metered as itself. Once an event was read, a failure is the
    /// stream's: nothing switches.
    pub async fn generate_with<W, F>(
        &self,
        key: &KeyRecord,
        model: &str,
        request: GenerateRequest,
        arrived: Instant,
        metering: Metering,
        wrap: W,
    ) -> Result<Generated, Refusal>
    where
        W: FnOnce(&Arc<dyn Engine>, &GenerateRequest) -> F,
        F: FnOnce(EventStream) -> EventStream,
    {
        let asked = self.serving(key, model, Capability::Generation)?;
        let fallbacks = asked.fallbacks.clone();
        // The models to try: the one asked for, then its fallbacks the key
        // may use that generate.
        let mut candidates = vec![model.to_owned()];
        for fallback in &fallbacks.models {
            if self.serving(key, fallback, Capability::Generation).is_ok() {
                candidates.push(fallback.clone());
            }
        }
        let count = candidates.len();
        let mut failure = None;
        let mut original = Some(request);
        let mut wrap = Some(wrap);
        for (at, candidate) in candidates.into_iter().enumerate() {
            let last = at + 1 == count;
            // Each candidate starts from the request as it came; the last takes it.
            let mut request = match (last, &original) {
                (false, Some(original)) => original.clone(),
                _ => match original.take() {
                    Some(request) => request,
                    None => break,
                },
            };
            let route = self.routed(key, &candidate, &mut request)?;
            let generator = route
                .engine
                .generating(&candidate)
                .map_err(Refusal::Engine)?;
            // One key's requests share the engine's per-client share of its slots.
            request.client = Some(key.id.to_string());
            request.background = crate::scoped::in_batch();
            let charge = self
                .budgets
                .charge(
                    key,
                    &candidate,
                    &request,
                    route.engine.as_ref(),
                    &metering.budget,
                )
                .await?;
            if failure.is_none() {
                self.metrics.gateway_overhead(&candidate, arrived.elapsed());
            }
            let (choices, prompt_tokens) = (request.n, svc_core::estimate_tokens(&request));
            // The engine's part begins (rendering, the queue, the prompt).
            if let Some(row) = crate::request_log::current() {
                row.engine_started();
            }
            let started = if last {
                let wrap = wrap.take().map(|w| w(&route.engine, &request));
                generator.generate(request).await.map(|events| match wrap {
                    Some(w) => w(events),
                    None => events,
                })
            } else {
                // With a fallback left, the first event decides.
                match generator.generate(request.clone()).await {
                    Ok(events) => first_event(events).await.map(|events| match wrap.take() {
                        Some(w) => w(&route.engine, &request)(events),
                        None => events,
                    }),
                    Err(e) => Err(e),
                }
            };
            let events = match started {
                Ok(events) => events,
                Err(e) if !last && falls_back(&e, fallbacks.on_context_length) => {
                    tracing::warn!(model = %candidate, error = %e, "the model failed before answering; its fallback is asked");
                    // Dropping the charge gives its estimate back.
                    drop(charge);
                    failure = Some(e);
                    continue;
                }
                Err(e) => return Err(Refusal::Engine(e)),
            };
            let bill = Bill {
                key_id: key.id.clone(),
                choices,
                charge,
                prompt_tokens,
            };
            let mut events = crate::usage::metered(
                events,
                self.meters(metering.count_tokens),
                &candidate,
                arrived,
                bill,
            );
            if self.watch_outcomes {
                let outcome = metering.outcome.clone();
                events = events.inspect(move |event| outcome.on(event)).boxed();
            }
            return Ok(Generated {
                events,
                model: candidate,
            });
        }
        // The last candidate returns (it never falls back).
        Err(failure.map_or_else(|| Refusal::ModelNotFound(model.to_owned()), Refusal::Engine))
    }

    /// Work answered in one piece (embeddings, rerank, a transcript,
    /// speech), admitted as a generation is: the model must serve
    /// `asked.capability` for the key ([`Admission::serving`]), the key's
    /// and its project's budgets are charged `asked.estimate` up front (a
    /// spent one refuses), the gateway's overhead since `asked.arrived` is
    /// recorded, then `work` runs on the model's engine, told who it is for
    /// ([`Origin`]), and the usage `used` reads off its answer is recorded:
    /// the ledger, the budgets settled from the estimate to it, the key's
    /// tokens per minute when `asked.metering` counts them, the metrics.
    /// A refusal or a failure gives the charge back and records nothing.
    pub async fn whole<'a, T, Fut>(
        &'a self,
        asked: Asked<'_>,
        work: impl FnOnce(&'a dyn Engine, Origin) -> Fut,
        used: impl FnOnce(&T) -> TokenUsage,
    ) -> Result<(T, TokenUsage), Refusal>
    where
        Fut: Future<Output = Result<T, EngineError>>,
    {
        let Asked {
            key,
            model,
            capability,
            metering,
            arrived,
            estimate,
        } = asked;
        let route = self.serving(key, model, capability)?;
        let charge = self
            .budgets
            .charge_usage(key, model, estimate, &metering.budget)
            .await?;
        self.metrics.gateway_overhead(model, arrived.elapsed());
        let origin = Origin {
            client: key.id.to_string(),
            background: crate::scoped::in_batch(),
        };
        let answer = work(route.engine.as_ref(), origin)
            .await
            .map_err(Refusal::Engine)?;
        let used = used(&answer);
        crate::usage::record_whole(
            self.meters(metering.count_tokens),
            &key.id,
            model,
            charge,
            used,
        );
        Ok((answer, used))
    }

    /// Admits a reply of `served` kept in the response cache, which took
    /// `saved` tokens when it was made: charged to `key`'s budgets at the
    /// model's `cached_response` price (free without one; a spent budget
    /// refuses it as any request), and counted as a request that used no
    /// tokens and saved `saved`.
    pub async fn cache_hit(
        &self,
        key: &KeyRecord,
        served: &str,
        saved: u64,
    ) -> Result<(), Refusal> {
        let charge = self
            .budgets
            .charge_cache_hit(
                key,
                served,
                i64::try_from(saved).unwrap_or(i64::MAX),
                &BudgetSlot::default(),
            )
            .await?;
        crate::usage::record_cache_hit(&self.ledger, &key.id, served, saved, charge);
        Ok(())
    }

    /// Where a request's usage goes; its tokens count toward the key's
    /// per-minute limit when `count_tokens`.
    fn meters(&self, count_tokens: bool) -> crate::usage::Meters<'_> {
        crate::usage::Meters {
            ledger: &self.ledger,
            limiter: count_tokens.then_some(&self.limiter),
            metrics: &self.metrics,
        }
    }
}

/// The stream, once its first item came: an error then is the start's.
async fn first_event(mut events: EventStream) -> Result<EventStream, EngineError> {
    match events.next().await {
        Some(Err(e)) => Err(e),
        Some(Ok(first)) => Ok(futures::stream::once(async move { Ok(first) })
            .chain(events)
            .boxed()),
        None => Ok(events),
    }
}

/// Whether a model's failure to start sends its request to a fallback:
/// the engine's failures do, the request's own do not (a prompt past the
/// context only when the model's `fallback_on_context_length` says so).
fn falls_back(error: &EngineError, on_context_length: bool) -> bool {
    match error {
        EngineError::Unavailable(_)
        | EngineError::Overloaded(_)
        | EngineError::BadGateway(_)
        | EngineError::GatewayTimeout(_)
        | EngineError::Internal(_) => true,
        EngineError::ContextLengthExceeded { .. } => on_context_length,
        EngineError::InvalidRequest { .. } => false,
    }
}

/// Whether a request reasons (and its reply carries the reasoning): as
/// OpenAI's reasoning models do, the model id decides whether the model
/// reasons (a route's `reasoning`, as `svc-thinking`'s), and the effort
/// tunes it: `none` and `minimal` turn it off, `low`, `medium` and `high`
/// (or no effort) leave it on. An effort never turns reasoning on for a
/// model id that does not reason (`svc`): on a model that does not think
/// by itself that would add a whole reasoning pass the client did not ask
/// the model id for; the effort still reaches the engine, which passes it
/// on to an upstream (whose model decides) and to a template that reads it.
pub fn reasons(route_reasons: bool, effort: Option<ReasoningEffort>) -> bool {
    route_reasons && effort.is_none_or(ReasoningEffort::thinks)
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::Mutex;

    use async_trait::async_trait;
    use svc_core::{
        Budget, BudgetPeriod, BudgetUnit, EngineEvent, FinishReason, KeyLimits, ModelAccess,
    };

    use super::*;
    use crate::registry::Fallbacks;

    /// An engine that answers each request with the next of its scripted
    /// answers (the last one again once they run out), and keeps what it
    /// was asked.
    struct Scripted {
        answers: Mutex<VecDeque<Result<Vec<EngineEvent>, EngineError>>>,
        asked: Mutex<Vec<GenerateRequest>>,
        prompt_tokens: u64,
    }

    impl Scripted {
        fn new(answers: Vec<Result<Vec<EngineEvent>, EngineError>>) -> Arc<Self> {
            Arc::new(Scripted {
                answers: Mutex::new(answers.into()),
                asked: Mutex::default(),
                prompt_tokens: 30,
            })
        }

        /// Answers every request with "hi", using `prompt_tokens` and 10.
        fn answering() -> Arc<Self> {
            Scripted::new(vec![Ok(reply("hi", 30, 10))])
        }

        fn failing(error: EngineError) -> Arc<Self> {
            Scripted::new(vec![Err(error)])
        }

        fn asked(&self) -> usize {
            self.asked.lock().unwrap().len()
        }
    }

    fn reply(text: &str, prompt: u64, completion: u64) -> Vec<EngineEvent> {
        vec![
            EngineEvent::Text(text.into()),
            EngineEvent::Finish {
                reason: FinishReason::Stop,
                usage: TokenUsage {
                    prompt_tokens: prompt,
                    cached_tokens: 0,
                    completion_tokens: completion,
                    ..TokenUsage::default()
                },
            },
        ]
    }

    #[async_trait]
    impl svc_core::Generator for Scripted {
        async fn generate(&self, request: GenerateRequest) -> Result<EventStream, EngineError> {
            self.asked.lock().unwrap().push(request);
            let answer = {
                let mut answers = self.answers.lock().unwrap();
                if answers.len() > 1 {
                    answers.pop_front()
                } else {
                    answers.front().cloned()
                }
            };
            let events = answer.unwrap_or_else(|| Ok(Vec::new()))?;
            Ok(futures::stream::iter(events.into_iter().map(Ok)).boxed())
        }

        async fn count_tokens(&self, _: &GenerateRequest) -> Result<u64, EngineError> {
            Ok(self.prompt_tokens)
        }

        fn sees_images(&self) -> bool {
            false
        }
    }

    impl Engine for Scripted {
        svc_core::offers!(generator);

        fn name(&self) -> &str {
            "scripted"
        }
    }

    fn route(id: &str, engine: Arc<Scripted>) -> ModelRoute {
        ModelRoute {
            id: id.into(),
            engine,
            reasoning: false,
            created: 0,
            owned_by: "test".into(),
            default_system_prompt: None,
            fallbacks: Fallbacks::default(),
        }
    }

    fn key(allowed: &[&str]) -> KeyRecord {
        KeyRecord {
            allowed_models: if allowed.is_empty() {
                ModelAccess::any()
            } else {
                ModelAccess(Some(allowed.iter().map(|m| (*m).to_owned()).collect()))
            },
            ..crate::fixtures::key("key_admission")
        }
    }

    async fn admission(routes: Vec<ModelRoute>) -> Admission {
        let store = svc_store::SqlStore::connect("sqlite::memory:")
            .await
            .unwrap();
        Admission {
            models: Arc::new(ModelRegistry::new(routes)),
            limiter: RateLimiter::local(KeyLimits::default()),
            budgets: Budgets::new(Arc::new(store), None, Default::default(), 80),
            ledger: Arc::default(),
            metrics: Arc::new(Metrics::new(None)),
            watch_outcomes: false,
        }
    }

    fn asking(max_tokens: u32) -> GenerateRequest {
        GenerateRequest {
            messages: vec![ChatMessage::User("hello".into())],
            max_tokens: Some(max_tokens),
            ..GenerateRequest::default()
        }
    }

    async fn text(generated: Generated) -> String {
        let mut text = String::new();
        let mut events = generated.events;
        while let Some(event) = events.next().await {
            if let Ok(EngineEvent::Text(t)) = event {
                text.push_str(&t);
            }
        }
        text
    }

    fn not_found(result: Result<impl Sized, Refusal>) -> Option<String> {
        match result {
            Err(Refusal::ModelNotFound(model)) => Some(model),
            _ => None,
        }
    }

    #[tokio::test]
    async fn a_model_the_key_may_not_use_is_one_that_does_not_exist() {
        let engine = Scripted::answering();
        let admission = admission(vec![
            route("open", Scripted::answering()),
            route("closed", engine.clone()),
        ])
        .await;
        let key = key(&["open"]);
        assert!(admission.usable(&key, "open").is_ok());
        assert_eq!(
            not_found(admission.usable(&key, "closed")).as_deref(),
            Some("closed")
        );
        assert_eq!(
            not_found(admission.usable(&key, "absent")).as_deref(),
            Some("absent")
        );
        let refused = admission
            .generate(
                &key,
                "closed",
                asking(5),
                Instant::now(),
                Metering::default(),
            )
            .await;
        assert_eq!(not_found(refused).as_deref(), Some("closed"));
        assert_eq!(
            engine.asked(),
            0,
            "the engine of a model the key may not use was asked"
        );
    }

    #[tokio::test]
    async fn a_route_sets_the_reasoning_flag_and_the_default_system_prompt() {
        let mut thinking = route("thinking", Scripted::answering());
        thinking.reasoning = true;
        thinking.default_system_prompt = Some("Be brief.".into());
        let admission = admission(vec![thinking]).await;
        let key = key(&[]);

        let mut request = asking(5);
        admission.routed(&key, "thinking", &mut request).unwrap();
        assert!(request.reasoning);
        assert_eq!(request.messages[0], ChatMessage::System("Be brief.".into()));
        assert_eq!(request.messages.len(), 2);

        // A request's own system message stands.
        let mut request = asking(5);
        request
            .messages
            .insert(0, ChatMessage::System("Be long.".into()));
        admission.routed(&key, "thinking", &mut request).unwrap();
        assert_eq!(request.messages[0], ChatMessage::System("Be long.".into()));
        assert_eq!(request.messages.len(), 2);

        // A text prompt is continued as it is.
        let mut request = GenerateRequest {
            prompt: Some(svc_core::TextPrompt {
                text: "Once".into(),
                suffix: None,
                score: false,
            }),
            ..GenerateRequest::default()
        };
        admission.routed(&key, "thinking", &mut request).unwrap();
        assert!(!request.reasoning);
        assert!(request.messages.is_empty());
    }

    #[tokio::test]
    async fn the_effort_turns_a_reasoning_models_reasoning_off_and_never_on() {
        let mut thinking = route("thinking", Scripted::answering());
        thinking.reasoning = true;
        let admission = admission(vec![thinking, route("plain", Scripted::answering())]).await;
        let key = key(&[]);
        for (model, effort, reasons) in [
            ("thinking", None, true),
            ("thinking", Some(ReasoningEffort::None), false),
            ("thinking", Some(ReasoningEffort::Minimal), false),
            ("thinking", Some(ReasoningEffort::Low), true),
            ("thinking", Some(ReasoningEffort::High), true),
            ("plain", None, false),
            ("plain", Some(ReasoningEffort::High), false),
            ("plain", Some(ReasoningEffort::None), false),
        ] {
            let mut request = GenerateRequest {
                reasoning_effort: effort,
                ..asking(5)
            };
            admission.routed(&key, model, &mut request).unwrap();
            assert_eq!(request.reasoning, reasons, "{model} at {effort:?}");
            assert_eq!(
                request.reasoning_effort, effort,
                "the effort reaches the engine"
            );
        }
    }

    #[tokio::test]
    async fn a_model_that_fails_before_answering_falls_back_to_the_next_one_the_key_may_use() {
        let (first, hidden, second) = (
            Scripted::failing(EngineError::Unavailable("down".into())),
            Scripted::answering(),
            Scripted::new(vec![Ok(reply("from the fallback", 30, 10))]),
        );
        let mut asked = route("first", first.clone());
        asked.fallbacks.models = vec!["hidden".into(), "second".into()];
        let admission = admission(vec![
            asked,
            route("hidden", hidden.clone()),
            route("second", second.clone()),
        ])
        .await;
        let key = key(&["first", "second"]);
        let generated = admission
            .generate(
                &key,
                "first",
                asking(5),
                Instant::now(),
                Metering::default(),
            )
            .await
            .unwrap();
        assert_eq!(generated.model, "second");
        assert_eq!(text(generated).await, "from the fallback");
        assert_eq!((first.asked(), hidden.asked(), second.asked()), (1, 0, 1));
        // The fallback got the request as it came, as one of this key's.
        let got = second.asked.lock().unwrap()[0].clone();
        assert_eq!(got.client.as_deref(), Some("key_admission"));
        assert_eq!(got.max_tokens, Some(5));
    }

    #[tokio::test]
    async fn the_requests_own_faults_do_not_fall_back() {
        for (error, on_context_length, falls) in [
            (
                EngineError::InvalidRequest {
                    param: None,
                    message: "bad".into(),
                },
                true,
                false,
            ),
            (
                EngineError::ContextLengthExceeded {
                    prompt_tokens: 9,
                    context: 8,
                },
                false,
                false,
            ),
            (
                EngineError::ContextLengthExceeded {
                    prompt_tokens: 9,
                    context: 8,
                },
                true,
                true,
            ),
            (EngineError::Overloaded("busy".into()), false, true),
        ] {
            let fallback = Scripted::answering();
            let mut asked = route("first", Scripted::failing(error.clone()));
            asked.fallbacks = Fallbacks {
                models: vec!["second".into()],
                on_context_length,
            };
            let admission = admission(vec![asked, route("second", fallback.clone())]).await;
            let result = admission
                .generate(
                    &key(&[]),
                    "first",
                    asking(5),
                    Instant::now(),
                    Metering::default(),
                )
                .await;
            match (falls, result) {
                (true, Ok(generated)) => assert_eq!(generated.model, "second", "{error:?}"),
                (false, Err(Refusal::Engine(e))) => assert_eq!(e, error),
                (_, other) => panic!("{error:?}: {:?}", other.map(|g| g.model)),
            }
            assert_eq!(fallback.asked(), usize::from(falls), "{error:?}");
        }
    }

    #[tokio::test]
    async fn a_key_past_its_requests_per_minute_is_refused_but_a_batch_line_is_not_counted() {
        let admission = admission(vec![route("m", Scripted::answering())]).await;
        let mut key = key(&[]);
        key.limits.requests_per_minute = Some(2);
        for _ in 0..2 {
            let verdict = admission.limit(&key).await.unwrap().unwrap();
            assert!(verdict.exceeded.is_none());
        }
        // A batch's lines keep the batch's pace: neither refused nor counted.
        let line = crate::scoped::as_batch_line(key.id.clone(), admission.limit(&key)).await;
        assert!(matches!(line, Ok(None)), "{line:?}");
        match admission.limit(&key).await {
            Err(Refusal::RateLimited(v)) => {
                assert_eq!(v.exceeded, Some(crate::ratelimit::Exceeded::Requests));
            }
            other => panic!("the third request of the minute: {other:?}"),
        }
        // A key without limits is not counted at all.
        assert!(matches!(admission.limit(&self::key(&[])).await, Ok(None)));
    }

    #[tokio::test]
    async fn budgets_are_charged_the_estimate_up_front_and_refuse_once_spent() {
        let engine = Scripted::answering();
        let admission = admission(vec![route("m", engine.clone())]).await;
        let mut key = key(&[]);
        key.budget = Some(Budget {
            limit: 100,
            unit: BudgetUnit::Tokens,
            period: BudgetPeriod::Day,
        });
        // The estimate: the prompt as the engine counts it (30) and
        // `max_tokens` (50) for the one reply.
        let first = Metering::default();
        let held = admission
            .generate(&key, "m", asking(50), Instant::now(), first.clone())
            .await
            .unwrap();
        let state = first.budget.take().unwrap();
        assert_eq!((state.limit, state.remaining), (100, 20));
        // A budget not yet spent admits one more, which may pass it.
        let second = Metering::default();
        let _also = admission
            .generate(&key, "m", asking(50), Instant::now(), second.clone())
            .await
            .unwrap();
        assert_eq!(second.budget.take().unwrap().remaining, -60);
        // Spent: refused before the engine is asked.
        let refused = admission
            .generate(&key, "m", asking(50), Instant::now(), Metering::default())
            .await;
        match refused {
            Err(Refusal::Spent(Spent(state))) => assert_eq!(state.remaining, -60),
            other => panic!("past the budget: {:?}", other.map(|g| g.model)),
        }
        assert_eq!(engine.asked(), 2);
        drop(held);
    }

    #[tokio::test]
    async fn a_request_of_several_replies_is_counted_once_with_their_tokens_summed() {
        let engine = Scripted::new(vec![Ok(vec![
            EngineEvent::Text("a".into()),
            EngineEvent::Finish {
                reason: FinishReason::Stop,
                usage: TokenUsage {
                    prompt_tokens: 30,
                    cached_tokens: 0,
                    completion_tokens: 4,
                    ..TokenUsage::default()
                },
            },
            EngineEvent::Choice(1),
            EngineEvent::Text("b".into()),
            EngineEvent::Finish {
                reason: FinishReason::Stop,
                usage: TokenUsage {
                    prompt_tokens: 0,
                    cached_tokens: 0,
                    completion_tokens: 6,
                    ..TokenUsage::default()
                },
            },
        ])]);
        let admission = admission(vec![route("m", engine)]).await;
        let key = key(&[]);
        let mut request = asking(50);
        request.n = 2;
        let generated = admission
            .generate(&key, "m", request, Instant::now(), Metering::default())
            .await
            .unwrap();
        assert_eq!(text(generated).await, "ab");
        let (requests, tokens) = admission.ledger.counted(&key.id, "m");
        assert_eq!(requests, 1);
        assert_eq!((tokens.prompt, tokens.completion), (30, 10));
    }

    #[tokio::test]
    async fn a_batch_line_goes_to_the_engine_as_background_work_of_its_key() {
        let engine = Scripted::answering();
        let admission = admission(vec![route("m", engine.clone())]).await;
        let key = key(&[]);
        let asked = admission.generate(&key, "m", asking(5), Instant::now(), Metering::default());
        text(asked.await.unwrap()).await;
        let line = crate::scoped::as_batch_line(
            key.id.clone(),
            admission.generate(&key, "m", asking(5), Instant::now(), Metering::default()),
        );
        text(line.await.unwrap()).await;
        let asked = engine.asked.lock().unwrap().clone();
        let background: Vec<bool> = asked.iter().map(|r| r.background).collect();
        assert_eq!(background, [false, true]);
        assert!(
            asked
                .iter()
                .all(|r| r.client.as_deref() == Some("key_admission"))
        );
    }

    /// An embedding model that records who each request was for and
    /// answers with a vector an input and 7 tokens, or fails.
    struct Embeds {
        fails: bool,
        origins: Mutex<Vec<(Option<String>, bool)>>,
    }

    #[async_trait]
    impl svc_core::Embedder for Embeds {
        async fn embed(
            &self,
            request: svc_core::EmbedRequest,
        ) -> Result<svc_core::Embeddings, EngineError> {
            let origin = (request.client.clone(), request.background);
            self.origins.lock().unwrap().push(origin);
            if self.fails {
                return Err(EngineError::Unavailable("down".into()));
            }
            Ok(svc_core::Embeddings {
                vectors: vec![vec![1.0]; request.inputs.len()],
                prompt_tokens: 7,
            })
        }
    }

    impl Engine for Embeds {
        svc_core::offers!(embedder);

        fn name(&self) -> &str {
            "embeds"
        }
    }

    fn embeds(fails: bool) -> Arc<Embeds> {
        Arc::new(Embeds {
            fails,
            origins: Mutex::default(),
        })
    }

    /// Embeds one input of `key` on `model` through [`Admission::whole`],
    /// estimated at 40 tokens.
    async fn embed_one(
        admission: &Admission,
        key: &KeyRecord,
        model: &str,
        metering: &Metering,
    ) -> Result<(svc_core::Embeddings, TokenUsage), Refusal> {
        let asked = Asked {
            key,
            model,
            capability: Capability::Embedding,
            metering,
            arrived: Instant::now(),
            estimate: Tokens::prompt_only(40),
        };
        let mut request = svc_core::EmbedRequest {
            inputs: vec![svc_core::EmbedInput::Text("x".into())],
            ..svc_core::EmbedRequest::default()
        };
        admission
            .whole(
                asked,
                |engine, origin| {
                    request.client = Some(origin.client);
                    request.background = origin.background;
                    async move { engine.embedding(model)?.embed(request).await }
                },
                |embeddings| TokenUsage::prompt_only(embeddings.prompt_tokens),
            )
            .await
    }

    fn with_budget(mut key: KeyRecord, tokens: i64) -> KeyRecord {
        key.budget = Some(Budget {
            limit: tokens,
            unit: BudgetUnit::Tokens,
            period: BudgetPeriod::Day,
        });
        key
    }

    #[tokio::test]
    async fn work_in_one_piece_is_charged_its_estimate_then_recorded_at_its_usage() {
        let engine = embeds(false);
        let mut route = route("m", Scripted::answering());
        route.engine = engine.clone();
        let admission = admission(vec![route]).await;
        let key = with_budget(key(&[]), 100);
        let metering = Metering::default();
        let (embeddings, used) = embed_one(&admission, &key, "m", &metering).await.unwrap();
        assert_eq!(embeddings.vectors.len(), 1);
        assert_eq!(used.prompt_tokens, 7);
        // The estimate was charged up front.
        assert_eq!(metering.budget.take().unwrap().remaining, 60);
        // What it used is what is recorded.
        let (requests, tokens) = admission.ledger.counted(&key.id, "m");
        assert_eq!((requests, tokens.prompt, tokens.completion), (1, 7, 0));
        // The settlement gives back what the estimate took over the usage:
        // a probe (charged the least, 1 token) finds 100 - 7 - 1 left.
        let mut remaining = 0;
        for _ in 0..100 {
            let next = Metering::default();
            let probe = admission
                .budgets
                .charge_usage(&key, "m", Tokens::prompt_only(0), &next.budget)
                .await
                .unwrap();
            drop(probe);
            remaining = next.budget.take().unwrap().remaining;
            if remaining == 92 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert_eq!(remaining, 92);
        // The engine was told whose work it is; a batch's line is background.
        let metering = Metering::default();
        let line = crate::scoped::as_batch_line(
            key.id.clone(),
            embed_one(&admission, &key, "m", &metering),
        );
        line.await.unwrap();
        let origins = engine.origins.lock().unwrap().clone();
        let client = Some("key_admission".to_owned());
        assert_eq!(origins, [(client.clone(), false), (client, true)]);
    }

    #[tokio::test]
    async fn a_model_without_the_capability_is_refused_before_any_charge() {
        let chat = Scripted::answering();
        let admission = admission(vec![route("chat", chat.clone())]).await;
        let key = with_budget(key(&[]), 100);
        let metering = Metering::default();
        let refused = embed_one(&admission, &key, "chat", &metering).await;
        let Err(Refusal::Engine(EngineError::InvalidRequest { param, message })) = refused else {
            panic!("a chat model embedded");
        };
        assert_eq!(param.as_deref(), Some("model"));
        assert!(
            message.starts_with("model chat does not create embeddings"),
            "{message}"
        );
        assert!(metering.budget.take().is_none(), "nothing charged");
        assert_eq!(admission.ledger.counted(&key.id, "chat").0, 0);
        // A model the key may not use is one that does not exist.
        let refused = embed_one(&admission, &self::key(&["other"]), "chat", &metering).await;
        assert!(matches!(refused, Err(Refusal::ModelNotFound(_))));
    }

    #[tokio::test]
    async fn failed_work_records_nothing_and_a_spent_budget_refuses_before_the_engine() {
        let engine = embeds(true);
        let mut route = route("m", Scripted::answering());
        route.engine = engine.clone();
        let admission = admission(vec![route]).await;
        let key = with_budget(key(&[]), 30);
        let failed = embed_one(&admission, &key, "m", &Metering::default()).await;
        assert!(matches!(
            failed,
            Err(Refusal::Engine(EngineError::Unavailable(_)))
        ));
        assert_eq!(admission.ledger.counted(&key.id, "m").0, 0);
        // The charge given back: a probe (charged the least, 1 token) finds
        // the budget whole.
        let mut admitted = false;
        for _ in 0..100 {
            let next = Metering::default();
            let probe = admission
                .budgets
                .charge_usage(&key, "m", Tokens::prompt_only(0), &next.budget)
                .await
                .unwrap();
            drop(probe);
            if next.budget.take().unwrap().remaining == 29 {
                admitted = true;
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert!(admitted, "the failed work's charge was not given back");
        // A budget spent by work in one piece refuses the next before its
        // engine is asked: 5 tokens, the first admitted (not yet spent),
        // using 7.
        let working = embeds(false);
        let mut route = self::route("w", Scripted::answering());
        route.engine = working.clone();
        let admission = self::admission(vec![route]).await;
        let key = with_budget(self::key(&[]), 5);
        embed_one(&admission, &key, "w", &Metering::default())
            .await
            .unwrap();
        let mut refused = None;
        for _ in 0..100 {
            match embed_one(&admission, &key, "w", &Metering::default()).await {
                Err(Refusal::Spent(_)) => {
                    refused = Some(());
                    break;
                }
                _ => tokio::time::sleep(std::time::Duration::from_millis(10)).await,
            }
        }
        assert!(refused.is_some(), "a spent budget admitted work");
        assert_eq!(engine.origins.lock().unwrap().len(), 1);
    }
}
