//! The upstream's `chat.completion.chunk` events (or one whole
//! `chat.completion`) as svc's [`EngineEvent`]s, keeping the engine
//! contract: deltas in order, tool calls numbered 0, 1, … with id and name
//! on their first piece, and exactly one `Finish` with usage, the
//! upstream's when it reports it and an estimate otherwise.
//!
//! The upstream's ids, `model` and framing are dropped here; the server
//! frames svc's own.

use serde::{Deserialize, Deserializer};
use serde_json::Value;
use svc_core::engine::{TokenLogprob, TopLogprob};
use svc_core::{EngineEvent, FinishReason, TokenUsage, ToolCallChunk};

use crate::error::{self, Failure};

/// Tokens in `chars` bytes of text, estimated at four a token (what the
/// usage says when an upstream reports none).
pub fn tokens_for_chars(chars: usize) -> u64 {
    chars.div_ceil(4) as u64
}

#[derive(Debug, Deserialize)]
struct Chunk {
    #[serde(default, deserialize_with = "null_as_default")]
    choices: Vec<ChunkChoice>,
    #[serde(default)]
    usage: Option<Usage>,
    #[serde(default)]
    error: Option<Value>,
    #[serde(default)]
    object: Option<String>,
}

#[derive(Debug, Deserialize)]
struct ChunkChoice {
    #[serde(default)]
    index: u32,
    /// `delta` in a chunk, `message` in a whole completion.
    #[serde(default, alias = "message", deserialize_with = "null_as_default")]
    delta: Delta,
    /// A legacy text completion's text (`delta` is then absent).
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    finish_reason: Option<String>,
    /// OpenAI's `{"content": [...]}`, or a legacy completion's four lists;
    /// anything else is ignored.
    #[serde(default, deserialize_with = "lenient")]
    logprobs: Option<Logprobs>,
}

#[derive(Debug, Default, Deserialize)]
struct Logprobs {
    #[serde(default, deserialize_with = "null_as_default")]
    content: Vec<UpTokenLogprob>,
    /// The legacy shape: the tokens, their log probabilities, and the
    /// likeliest tokens at each position.
    #[serde(default, deserialize_with = "null_as_default")]
    tokens: Vec<String>,
    #[serde(default, deserialize_with = "null_as_default")]
    token_logprobs: Vec<Option<f32>>,
    #[serde(default, deserialize_with = "null_as_default")]
    top_logprobs: Vec<Option<std::collections::HashMap<String, f32>>>,
}

impl Logprobs {
    /// The tokens in svc's form, from whichever shape the upstream sent.
    fn into_engine(self) -> Vec<TokenLogprob> {
        if !self.content.is_empty() {
            return self
                .content
                .into_iter()
                .map(UpTokenLogprob::into_engine)
                .collect();
        }
        let mut tops = self.top_logprobs.into_iter();
        self.tokens
            .into_iter()
            .zip(self.token_logprobs)
            .map(|(token, logprob)| {
                let mut top: Vec<TopLogprob> = tops
                    .next()
                    .flatten()
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(token, logprob)| TopLogprob {
                        bytes: token.as_bytes().to_vec(),
                        token,
                        logprob,
                    })
                    .collect();
                top.sort_by(|a, b| b.logprob.total_cmp(&a.logprob).then(a.token.cmp(&b.token)));
                TokenLogprob {
                    bytes: token.as_bytes().to_vec(),
                    token,
                    logprob: logprob.unwrap_or(f32::NEG_INFINITY),
                    top,
                }
            })
            .collect()
    }
}

#[derive(Debug, Deserialize)]
struct UpTokenLogprob {
    token: String,
    logprob: f32,
    #[serde(default)]
    bytes: Option<Vec<u8>>,
    #[serde(default, deserialize_with = "null_as_default")]
    top_logprobs: Vec<UpTopLogprob>,
}

#[derive(Debug, Deserialize)]
struct UpTopLogprob {
    token: String,
    logprob: f32,
    #[serde(default)]
    bytes: Option<Vec<u8>>,
}

/// `T` when the value reads as one, else `None` (never an error).
fn lenient<'de, D, T>(de: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: serde::de::DeserializeOwned,
{
    let value = Value::deserialize(de)?;
    Ok(serde_json::from_value(value).ok())
}

impl UpTokenLogprob {
    fn into_engine(self) -> TokenLogprob {
        TokenLogprob {
            bytes: self.bytes.unwrap_or_else(|| self.token.as_bytes().to_vec()),
            token: self.token,
            logprob: self.logprob,
            top: self
                .top_logprobs
                .into_iter()
                .map(|t| TopLogprob {
                    bytes: t.bytes.unwrap_or_else(|| t.token.as_bytes().to_vec()),
                    token: t.token,
                    logprob: t.logprob,
                })
                .collect(),
        }
    }
}

#[derive(Debug, Default, Deserialize)]
struct Delta {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    reasoning_content: Option<String>,
    /// vLLM's name for the same thing.
    #[serde(default)]
    reasoning: Option<String>,
    #[serde(default, deserialize_with = "null_as_default")]
    tool_calls: Vec<ToolCallDelta>,
}

#[derive(Debug, Deserialize)]
struct ToolCallDelta {
    #[serde(default)]
    index: Option<u32>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default, deserialize_with = "null_as_default")]
    function: FunctionDelta,
}

#[derive(Debug, Default, Deserialize)]
struct FunctionDelta {
    #[serde(default)]
    name: Option<String>,
    /// A string by the spec; some servers send the object itself.
    #[serde(default)]
    arguments: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct Usage {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
    /// OpenAI's, vLLM's and llama-server's count of prompt tokens served
    /// from their prefix cache; anything else is ignored.
    #[serde(default, deserialize_with = "lenient")]
    prompt_tokens_details: Option<PromptTokensDetails>,
}

#[derive(Debug, Default, Deserialize)]
struct PromptTokensDetails {
    #[serde(default, deserialize_with = "lenient")]
    cached_tokens: Option<u64>,
}

fn null_as_default<'de, D, T>(de: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(de)?.unwrap_or_default())
}

/// Whether the stream is over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    More,
    /// `[DONE]`, or the finish reason and the usage both arrived: the
    /// `Finish` event was pushed and nothing more is read.
    Done,
}

/// One tool call seen so far, by the upstream's index and id.
#[derive(Debug)]
struct SeenCall {
    index: Option<u32>,
    id: Option<String>,
}

/// Translation state of one generation.
#[derive(Debug)]
pub struct Translator {
    keep_reasoning: bool,
    prompt_estimate: u64,
    calls: Vec<SeenCall>,
    finish: Option<FinishReason>,
    usage: Option<TokenUsage>,
    /// Bytes of generated text, for the usage estimate.
    output_bytes: usize,
}

impl Translator {
    /// `keep_reasoning`: pass reasoning deltas on (else drop them).
    /// `prompt_estimate`: the prompt tokens to report if the upstream
    /// reports no usage.
    pub fn new(keep_reasoning: bool, prompt_estimate: u64) -> Self {
        Translator {
            keep_reasoning,
            prompt_estimate,
            calls: Vec::new(),
            finish: None,
            usage: None,
            output_bytes: 0,
        }
    }

    /// One SSE event's data.
    pub fn event(
        &mut self,
        event: Option<&str>,
        data: &str,
        out: &mut Vec<EngineEvent>,
    ) -> Result<Step, Failure> {
        if data.trim() == "[DONE]" {
            return self.done(out);
        }
        let chunk: Chunk = serde_json::from_str(data).map_err(|e| {
            Failure::BadResponse(format!("an upstream event is not a chat chunk: {e}"))
        })?;
        if chunk.error.is_some()
            || chunk.object.as_deref() == Some("error")
            || event == Some("error")
        {
            return Err(error::in_stream(data));
        }
        self.chunk(chunk, out);
        if self.finish.is_some() && self.usage.is_some() {
            return self.done(out);
        }
        Ok(Step::More)
    }

    /// A whole `chat.completion` body (an upstream that ignored `stream`).
    pub fn whole(&mut self, body: &[u8], out: &mut Vec<EngineEvent>) -> Result<(), Failure> {
        let chunk: Chunk = serde_json::from_slice(body).map_err(|e| {
            Failure::BadResponse(format!("the upstream body is not a chat completion: {e}"))
        })?;
        if chunk.error.is_some() || chunk.object.as_deref() == Some("error") {
            return Err(error::in_stream(&String::from_utf8_lossy(body)));
        }
        self.chunk(chunk, out);
        if self.finish.is_none() {
            return Err(Failure::BadResponse(
                "the upstream completion has no finish_reason".into(),
            ));
        }
        self.done(out).map(|_| ())
    }

    /// The body ended without `[DONE]`: fine once the finish reason came.
    pub fn end_of_body(&mut self, out: &mut Vec<EngineEvent>) -> Result<Step, Failure> {
        if self.finish.is_some() {
            self.done(out)
        } else {
            Err(Failure::BadResponse(
                "the upstream stream ended before it finished".into(),
            ))
        }
    }

    /// Whether the finish reason arrived (only usage may still be missing).
    pub fn finished(&self) -> bool {
        self.finish.is_some()
    }

    fn done(&mut self, out: &mut Vec<EngineEvent>) -> Result<Step, Failure> {
        let Some(mut reason) = self.finish else {
            return Err(Failure::BadResponse(
                "the upstream stream ended without a finish_reason".into(),
            ));
        };
        if reason == FinishReason::Stop && !self.calls.is_empty() {
            reason = FinishReason::ToolCalls;
        }
        let usage = self.usage.unwrap_or(TokenUsage {
            prompt_tokens: self.prompt_estimate,
            cached_tokens: 0,
            completion_tokens: tokens_for_chars(self.output_bytes),
            ..TokenUsage::default()
        });
        out.push(EngineEvent::Finish { reason, usage });
        Ok(Step::Done)
    }

    fn chunk(&mut self, chunk: Chunk, out: &mut Vec<EngineEvent>) {
        if let Some(usage) = chunk.usage
            && (usage.prompt_tokens.is_some() || usage.completion_tokens.is_some())
        {
            let prompt_tokens = usage.prompt_tokens.unwrap_or(0);
            let cached = usage.prompt_tokens_details.and_then(|d| d.cached_tokens);
            self.usage = Some(TokenUsage {
                prompt_tokens,
                // Never more than the prompt: budgets price the rest.
                cached_tokens: cached.unwrap_or(0).min(prompt_tokens),
                completion_tokens: usage.completion_tokens.unwrap_or(0),
                ..TokenUsage::default()
            });
        }
        // One choice is asked for; anything else is not ours.
        for choice in chunk.choices.into_iter().filter(|c| c.index == 0) {
            let delta = choice.delta;
            let reasoning = match (delta.reasoning_content, delta.reasoning) {
                (Some(r), _) if !r.is_empty() => Some(r),
                (_, r) => r,
            };
            if let Some(text) = reasoning.filter(|t| !t.is_empty()) {
                self.output_bytes += text.len();
                if self.keep_reasoning {
                    out.push(EngineEvent::Reasoning(text));
                }
            }
            let content = delta.content.or(choice.text);
            if let Some(text) = content.filter(|t| !t.is_empty()) {
                self.output_bytes += text.len();
                // The upstream's content log probabilities (when asked for), before their text.
                let tokens: Vec<TokenLogprob> = choice
                    .logprobs
                    .map(Logprobs::into_engine)
                    .unwrap_or_default();
                if !tokens.is_empty() {
                    out.push(EngineEvent::Logprobs(tokens));
                }
                out.push(EngineEvent::Text(text));
            }
            for call in delta.tool_calls {
                self.tool_call(call, out);
            }
            if let Some(reason) = choice.finish_reason {
                self.finish = Some(finish_reason(&reason));
            }
        }
    }

    fn tool_call(&mut self, call: ToolCallDelta, out: &mut Vec<EngineEvent>) {
        let arguments = match call.function.arguments {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(s)) => s,
            Some(other) => other.to_string(),
        };
        self.output_bytes += arguments.len() + call.function.name.as_deref().map_or(0, str::len);
        let known = match call.index {
            Some(index) => self.calls.iter().position(|c| c.index == Some(index)),
            // Without an index, a new id starts a new call; no id continues
            // the last one.
            None => match (&call.id, self.calls.last()) {
                (Some(id), Some(last)) if last.id.as_ref() != Some(id) => None,
                _ => self.calls.len().checked_sub(1),
            },
        };
        match known {
            Some(index) => {
                if !arguments.is_empty() {
                    out.push(EngineEvent::ToolCall(ToolCallChunk {
                        index: index as u32,
                        id: None,
                        name: None,
                        arguments,
                    }));
                }
            }
            None => {
                let index = self.calls.len() as u32;
                let id = call
                    .id
                    .clone()
                    .filter(|id| !id.is_empty())
                    .unwrap_or_else(|| format!("call_{}", hex::encode(rand::random::<[u8; 12]>())));
                self.calls.push(SeenCall {
                    index: call.index,
                    id: call.id,
                });
                out.push(EngineEvent::ToolCall(ToolCallChunk {
                    index,
                    id: Some(id),
                    name: Some(call.function.name.unwrap_or_default()),
                    arguments,
                }));
            }
        }
    }
}

fn finish_reason(reason: &str) -> FinishReason {
    match reason {
        "length" | "max_tokens" | "model_length" => FinishReason::Length,
        "tool_calls" | "function_call" => FinishReason::ToolCalls,
        // `stop`, `eos`, `content_filter`, and whatever else a server says.
        _ => FinishReason::Stop,
    }
}

#[cfg(test)]
mod tests {
    use svc_core::EngineError;

    use super::*;

    fn rejected(failure: &Failure) -> Option<&EngineError> {
        match failure {
            Failure::Rejected(e) => Some(e),
            _ => None,
        }
    }

    #[test]
    fn content_logprobs_come_before_their_text() {
        let out = run(
            false,
            &[
                r#"{"choices":[{"index":0,"delta":{"content":"Hi"},"logprobs":{"content":[{"token":"Hi","logprob":-0.25,"bytes":[72,105],"top_logprobs":[{"token":"Hi","logprob":-0.25,"bytes":[72,105]},{"token":"Yo","logprob":-2.0,"bytes":null}]}],"refusal":null},"finish_reason":null}]}"#,
                r#"{"choices":[{"index":0,"delta":{"content":"!"},"logprobs":"odd","finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":2}}"#,
            ],
        )
        .unwrap();
        assert_eq!(
            out[0],
            EngineEvent::Logprobs(vec![TokenLogprob {
                token: "Hi".into(),
                logprob: -0.25,
                bytes: b"Hi".to_vec(),
                top: vec![
                    TopLogprob {
                        token: "Hi".into(),
                        logprob: -0.25,
                        bytes: b"Hi".to_vec()
                    },
                    TopLogprob {
                        token: "Yo".into(),
                        logprob: -2.0,
                        bytes: b"Yo".to_vec()
                    },
                ],
            }])
        );
        assert_eq!(out[1], text("Hi"));
        // Log probabilities in a shape svc does not read are left out.
        assert_eq!(out[2], text("!"));
    }

    fn run(keep_reasoning: bool, events: &[&str]) -> Result<Vec<EngineEvent>, Failure> {
        let mut t = Translator::new(keep_reasoning, 7);
        let mut out = Vec::new();
        for data in events {
            if t.event(None, data, &mut out)? == Step::Done {
                return Ok(out);
            }
        }
        t.end_of_body(&mut out)?;
        Ok(out)
    }

    fn text(s: &str) -> EngineEvent {
        EngineEvent::Text(s.into())
    }

    fn finish(reason: FinishReason, prompt: u64, completion: u64) -> EngineEvent {
        EngineEvent::Finish {
            reason,
            usage: TokenUsage {
                prompt_tokens: prompt,
                cached_tokens: 0,
                completion_tokens: completion,
                ..TokenUsage::default()
            },
        }
    }

    const ROLE: &str = r#"{"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#;

    #[test]
    fn vllm_stream_with_usage() {
        let events = run(
            false,
            &[
                ROLE,
                r#"{"choices":[{"index":0,"delta":{"content":"Hel"},"finish_reason":null}],"usage":null}"#,
                r#"{"choices":[{"index":0,"delta":{"content":"lo"},"logprobs":null,"finish_reason":"stop","stop_reason":null}]}"#,
                r#"{"choices":[],"usage":{"prompt_tokens":12,"total_tokens":14,"completion_tokens":2}}"#,
                "[DONE]",
            ],
        )
        .unwrap();
        assert_eq!(
            events,
            [text("Hel"), text("lo"), finish(FinishReason::Stop, 12, 2)]
        );
    }

    // Issue 32: an upstream's own count of cached prompt tokens is passed
    // on (never more than the prompt); a malformed one counts none.
    #[test]
    fn cached_prompt_tokens_are_passed_on() {
        let with_details = |details: &str| {
            let usage = format!(
                r#"{{"choices":[],"usage":{{"prompt_tokens":12,"completion_tokens":2,"prompt_tokens_details":{details}}}}}"#
            );
            let finish_chunk =
                r#"{"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":"stop"}]}"#;
            let events = run(false, &[finish_chunk, &usage, "[DONE]"]).unwrap();
            match events.last() {
                Some(EngineEvent::Finish { usage, .. }) => *usage,
                other => panic!("no finish: {other:?}"),
            }
        };
        let cached = |details: &str| with_details(details).cached_tokens;
        assert_eq!(cached(r#"{"cached_tokens":8}"#), 8);
        assert_eq!(cached(r#"{"cached_tokens":99}"#), 12);
        assert_eq!(cached(r#"{"cached_tokens":"lots"}"#), 0);
        assert_eq!(cached("null"), 0);
        assert_eq!(cached(r#"{"audio_tokens":0}"#), 0);
        assert_eq!(with_details(r#"{"cached_tokens":8}"#).prompt_tokens, 12);
    }

    #[test]
    fn usage_is_estimated_when_missing() {
        let events = run(
            false,
            &[
                r#"{"choices":[{"index":0,"delta":{"content":"abcdefghi"}}]}"#,
                r#"{"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}"#,
                "[DONE]",
            ],
        )
        .unwrap();
        assert_eq!(
            events,
            [text("abcdefghi"), finish(FinishReason::Length, 7, 3)]
        );
        // A body that ends after the finish reason, without `[DONE]`.
        let events = run(
            false,
            &[r#"{"choices":[{"index":0,"delta":{"content":"ab"},"finish_reason":"stop"}]}"#],
        )
        .unwrap();
        assert_eq!(events, [text("ab"), finish(FinishReason::Stop, 7, 1)]);
    }

    #[test]
    fn reasoning_in_either_field_is_kept_or_dropped() {
        let stream = [
            r#"{"choices":[{"index":0,"delta":{"reasoning_content":"Hmm. "}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"reasoning":"Yes."}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"reasoning_content":null,"reasoning":null,"content":"Paris"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":4}}"#,
        ];
        assert_eq!(
            run(true, &stream).unwrap(),
            [
                EngineEvent::Reasoning("Hmm. ".into()),
                EngineEvent::Reasoning("Yes.".into()),
                text("Paris"),
                finish(FinishReason::Stop, 3, 4),
            ]
        );
        assert_eq!(
            run(false, &stream).unwrap(),
            [text("Paris"), finish(FinishReason::Stop, 3, 4)]
        );
    }

    fn call(index: u32, id: Option<&str>, name: Option<&str>, args: &str) -> EngineEvent {
        EngineEvent::ToolCall(ToolCallChunk {
            index,
            id: id.map(Into::into),
            name: name.map(Into::into),
            arguments: args.into(),
        })
    }

    #[test]
    fn tool_call_deltas_are_renumbered_and_split() {
        let events = run(
            false,
            &[
                r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":3,"id":"call_a","type":"function","function":{"name":"weather","arguments":""}}]}}]}"#,
                r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":3,"function":{"arguments":"{\"city\":"}}]}}]}"#,
                r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":5,"id":"call_b","function":{"name":"time","arguments":"{}"}},{"index":3,"id":"call_a","function":{"name":"weather","arguments":"\"Paris\"}"}}]}}]}"#,
                r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
                "[DONE]",
            ],
        )
        .unwrap();
        assert_eq!(
            events[..4],
            [
                call(0, Some("call_a"), Some("weather"), ""),
                call(0, None, None, "{\"city\":"),
                call(1, Some("call_b"), Some("time"), "{}"),
                call(0, None, None, "\"Paris\"}"),
            ]
        );
        // `stop` after calls is reported as `tool_calls`.
        assert!(matches!(
            events[4],
            EngineEvent::Finish {
                reason: FinishReason::ToolCalls,
                ..
            }
        ));
    }

    #[test]
    fn tool_calls_without_index_or_id() {
        let events = run(
            false,
            &[
                r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"function":{"name":"f","arguments":{"x":1}}}]}}]}"#,
                r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"id":"c2","function":{"name":"g","arguments":"{}"}}]}}]}"#,
                r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":1,"completion_tokens":1}}"#,
            ],
        )
        .unwrap();
        let EngineEvent::ToolCall(first) = &events[0] else {
            panic!("{events:?}")
        };
        assert!(first.id.as_deref().unwrap().starts_with("call_"));
        assert_eq!(first.arguments, r#"{"x":1}"#);
        assert_eq!(events[1], call(1, Some("c2"), Some("g"), "{}"));
    }

    #[test]
    fn whole_completion() {
        let mut t = Translator::new(true, 0);
        let mut out = Vec::new();
        t.whole(
            br#"{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"Hi","reasoning_content":"R","tool_calls":null},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}"#,
            &mut out,
        )
        .unwrap();
        assert_eq!(
            out,
            [
                EngineEvent::Reasoning("R".into()),
                text("Hi"),
                finish(FinishReason::Stop, 5, 1)
            ]
        );
    }

    #[test]
    fn broken_streams_are_failures() {
        assert!(matches!(
            run(false, &[ROLE, "{not json"]),
            Err(Failure::BadResponse(_))
        ));
        assert!(matches!(
            run(
                false,
                &[ROLE, r#"{"choices":[{"index":0,"delta":{"content":"a"}}]}"#]
            ),
            Err(Failure::BadResponse(_))
        ));
        assert!(matches!(
            run(false, &[ROLE, "[DONE]"]),
            Err(Failure::BadResponse(_))
        ));
        // An error object in the stream: a server error is the endpoint's
        // fault, a 400 is the request's.
        assert!(matches!(
            run(
                false,
                &[ROLE, r#"{"error":{"message":"engine died","code":500}}"#]
            ),
            Err(Failure::BadResponse(_))
        ));
        let refused = run(
            false,
            &[r#"{"object":"error","message":"bad stop","type":"BadRequestError","param":"stop","code":400}"#],
        )
        .unwrap_err();
        assert_eq!(
            rejected(&refused),
            Some(&EngineError::InvalidRequest {
                param: Some("stop".into()),
                message: "bad stop".into()
            })
        );
    }
}
