//! [`Api`]: the HTTP calls the client makes, each turned into typed
//! answers or a [`Failure`]. Error bodies are read in OpenAI's shape
//! (`{"error":{"message",...}}`) and their message shown as the server
//! wrote it.

use std::collections::VecDeque;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use reqwest::{RequestBuilder, Response, StatusCode};
use svc_api::{
    ChatCompletionChunk, ChatCompletionRequest, DeviceCodeResponse, DeviceTokenRequest,
    DeviceTokenResponse, ErrorBody, KeyInfo, ModelList, Usage,
};
use svc_core::ApiKey;

use super::failure::Failure;
use super::sse::SseDecoder;
use super::target::BaseUrl;

/// How long a non-streaming call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// How long connecting may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The `client_id` shown on the approval page.
pub const CLIENT_ID: &str = "svc-cli";

/// A client for one server, with or without a key.
#[derive(Clone)]
pub struct Api {
    http: reqwest::Client,
    base_url: BaseUrl,
    key: Option<ApiKey>,
}

/// What a poll of the device-token endpoint said.
#[derive(Debug)]
pub enum Poll {
    Pending,
    /// Poll less often: add 5 seconds to the interval.
    SlowDown,
    Approved {
        key: ApiKey,
        expires_in: Option<i64>,
    },
    Denied,
    /// The code expired (`expired_token`) or is unknown or used (`invalid_grant`).
    Expired(String),
}

/// The answer to `DELETE /v1/auth/key`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Revocation {
    /// The server revoked the key.
    Revoked,
    /// The server already refuses the key (revoked, expired or unknown).
    AlreadyRefused,
    /// This server cannot revoke keys for clients (404 or 405).
    Unsupported,
}

/// One thing a streamed reply said.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent {
    Reasoning(String),
    Content(String),
    /// The choice finished: `stop`, `length`, `tool_calls`, ...
    Finish(String),
    Usage(Usage),
}

/// The certificates of `SSL_CERT_FILE`, when it is set; a file that
/// cannot be read or holds no certificate is an error that names it.
fn extra_roots() -> Result<Vec<reqwest::Certificate>, Failure> {
    let Some(path) = std::env::var_os("SSL_CERT_FILE").filter(|p| !p.is_empty()) else {
        return Ok(Vec::new());
    };
    let shown = std::path::Path::new(&path).display().to_string();
    let pem =
        std::fs::read(&path).map_err(|e| Failure::Local(format!("SSL_CERT_FILE {shown}: {e}")))?;
    match reqwest::Certificate::from_pem_bundle(&pem) {
        Ok(roots) if !roots.is_empty() => Ok(roots),
        Ok(_) => Err(Failure::Local(format!(
            "SSL_CERT_FILE {shown}: no PEM certificate in it"
        ))),
        Err(e) => Err(Failure::Local(format!("SSL_CERT_FILE {shown}: {e}"))),
    }
}

impl Api {
    /// A client for `base_url`, sending `key` as the bearer token when given.
    /// Besides the built-in certificate authorities, those of the PEM
    /// bundle named by `SSL_CERT_FILE` are trusted (as curl, OpenSSL and
    /// Python read it): a server with a private CA's certificate.
    pub fn new(base_url: BaseUrl, key: Option<ApiKey>) -> Result<Self, Failure> {
        let mut builder = reqwest::Client::builder()
            .user_agent(concat!("svc-cli/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(CONNECT_TIMEOUT);
        for root in extra_roots()? {
            builder = builder.add_root_certificate(root);
        }
        let http = builder
            .build()
            .map_err(|e| Failure::Local(format!("cannot start the HTTP client: {e}")))?;
        Ok(Api {
            http,
            base_url,
            key,
        })
    }

    pub fn base_url(&self) -> &BaseUrl {
        &self.base_url
    }

    fn post(&self, path: &str) -> RequestBuilder {
        self.authorized(self.http.post(self.base_url.join(path)))
    }

    fn get(&self, path: &str) -> RequestBuilder {
        self.authorized(self.http.get(self.base_url.join(path)))
    }

    fn authorized(&self, request: RequestBuilder) -> RequestBuilder {
        match &self.key {
            Some(key) => request.bearer_auth(key.expose()),
            None => request,
        }
    }

    /// Sends `request`; a failure to connect becomes [`Failure::Network`].
    async fn send(&self, request: RequestBuilder) -> Result<Response, Failure> {
        request.send().await.map_err(|e| self.network(&e))
    }

    fn network(&self, error: &reqwest::Error) -> Failure {
        Failure::Network {
            url: self.base_url.to_string(),
            reason: root_cause(error),
        }
    }

    /// Reads a JSON body, or the failure a non-2xx status means.
    async fn json<T: serde::de::DeserializeOwned>(&self, response: Response) -> Result<T, Failure> {
        let response = self.check(response).await?;
        let bytes = response.bytes().await.map_err(|e| self.network(&e))?;
        serde_json::from_slice(&bytes).map_err(|e| Failure::Protocol(e.to_string()))
    }

    /// Passes a 2xx response; turns any other into its failure.
    async fn check(&self, response: Response) -> Result<Response, Failure> {
        if response.status().is_success() {
            return Ok(response);
        }
        let status = response.status();
        let body = response.bytes().await.unwrap_or_default();
        Err(self.failure(status, &body))
    }

    fn failure(&self, status: StatusCode, body: &[u8]) -> Failure {
        let message = error_message(body).unwrap_or_else(|| {
            status
                .canonical_reason()
                .unwrap_or("unexpected status")
                .to_owned()
        });
        if status == StatusCode::UNAUTHORIZED {
            Failure::Unauthorized {
                hint: self
                    .key
                    .as_ref()
                    .map_or_else(|| "none sent".to_owned(), ApiKey::hint),
                message,
            }
        } else {
            Failure::Api {
                status: status.as_u16(),
                message,
            }
        }
    }

    /// `POST /v1/auth/device/code`.
    pub async fn device_code(&self) -> Result<DeviceCodeResponse, Failure> {
        let request = self
            .post("/v1/auth/device/code")
            .timeout(CALL_TIMEOUT)
            .form(&[("client_id", CLIENT_ID)]);
        let response = self.send(request).await?;
        self.json(response).await
    }

    /// `POST /v1/auth/device/token`, once.
    pub async fn device_token(&self, device_code: &str) -> Result<Poll, Failure> {
        let request = self
            .post("/v1/auth/device/token")
            .timeout(CALL_TIMEOUT)
            .json(&DeviceTokenRequest {
                device_code: device_code.to_owned(),
            });
        let response = self.send(request).await?;
        let status = response.status();
        if status == StatusCode::BAD_REQUEST {
            let body = response.bytes().await.map_err(|e| self.network(&e))?;
            let parsed: Option<ErrorBody> = serde_json::from_slice(&body).ok();
            return match parsed.as_ref().and_then(|b| b.error.code.as_deref()) {
                Some("slow_down") => Ok(Poll::SlowDown),
                Some("authorization_pending") => Ok(Poll::Pending),
                Some("access_denied") => Ok(Poll::Denied),
                Some("expired_token") => Ok(Poll::Expired(
                    "the login code expired before it was approved.".into(),
                )),
                Some("invalid_grant") => Ok(Poll::Expired(
                    "the server no longer knows this login code (it expired or was used).".into(),
                )),
                _ => Err(self.failure(status, &body)),
            };
        }
        let body: DeviceTokenResponse = self.json(response).await?;
        match (body.status.as_str(), body.access_token) {
            ("pending", _) => Ok(Poll::Pending),
            ("approved", Some(token)) => {
                let key = ApiKey::parse(&token)
                    .map_err(|e| Failure::Protocol(format!("the issued key is malformed: {e}")))?;
                Ok(Poll::Approved {
                    key,
                    expires_in: body.expires_in,
                })
            }
            (other, _) => Err(Failure::Protocol(format!(
                "device token status {other:?} without a key"
            ))),
        }
    }

    /// `GET /v1/models`.
    pub async fn models(&self) -> Result<ModelList, Failure> {
        let response = self
            .send(self.get("/v1/models").timeout(CALL_TIMEOUT))
            .await?;
        self.json(response).await
    }

    /// `GET /v1/auth/key`; `None` when the server has no such endpoint.
    pub async fn key_info(&self) -> Result<Option<KeyInfo>, Failure> {
        let response = self
            .send(self.get("/v1/auth/key").timeout(CALL_TIMEOUT))
            .await?;
        if matches!(
            response.status(),
            StatusCode::NOT_FOUND | StatusCode::METHOD_NOT_ALLOWED
        ) {
            return Ok(None);
        }
        self.json(response).await.map(Some)
    }

    /// `DELETE /v1/auth/key`: revokes the key this client sends.
    pub async fn revoke_key(&self) -> Result<Revocation, Failure> {
        let request = self
            .authorized(self.http.delete(self.base_url.join("/v1/auth/key")))
            .timeout(CALL_TIMEOUT);
        let response = self.send(request).await?;
        match response.status() {
            s if s.is_success() => Ok(Revocation::Revoked),
            StatusCode::UNAUTHORIZED => Ok(Revocation::AlreadyRefused),
            StatusCode::NOT_FOUND | StatusCode::METHOD_NOT_ALLOWED => Ok(Revocation::Unsupported),
            _ => Err(self.check(response).await.err().unwrap_or_else(|| {
                Failure::Protocol("unexpected answer to the revocation".into())
            })),
        }
    }

    /// `POST /v1/chat/completions` with `stream: true`; the events of the
    /// reply as they come. Dropping the stream closes the connection, which
    /// stops the generation on the server.
    pub async fn chat_stream(
        &self,
        request: &ChatCompletionRequest,
    ) -> Result<ChatStream, Failure> {
        let mut request = request.clone();
        request.stream = Some(true);
        let response = self
            .send(self.post("/v1/chat/completions").json(&request))
            .await?;
        let response = self.check(response).await?;
        Ok(ChatStream {
            body: response.bytes_stream().boxed(),
            decoder: SseDecoder::new(),
            events: VecDeque::new(),
            failed: None,
            done: false,
            api: self.clone(),
        })
    }
}

/// The events of one streamed reply.
pub struct ChatStream {
    body: BoxStream<'static, reqwest::Result<Bytes>>,
    decoder: SseDecoder,
    /// Events read but not handed out yet, in order.
    events: VecDeque<StreamEvent>,
    /// A failure to hand out once `events` is drained.
    failed: Option<Failure>,
    done: bool,
    api: Api,
}

impl ChatStream {
    /// The next event; `None` after `data: [DONE]`.
    pub async fn next(&mut self) -> Result<Option<StreamEvent>, Failure> {
        loop {
            if let Some(event) = self.events.pop_front() {
                return Ok(Some(event));
            }
            if let Some(failure) = self.failed.take() {
                self.done = true;
                return Err(failure);
            }
            if self.done {
                return Ok(None);
            }
            match self.body.next().await {
                Some(Ok(bytes)) => {
                    for data in self.decoder.push(&bytes) {
                        if let Err(failure) = self.read(&data) {
                            self.failed = Some(failure);
                        }
                        if self.done || self.failed.is_some() {
                            break;
                        }
                    }
                }
                Some(Err(e)) => self.failed = Some(self.api.network(&e)),
                None => {
                    self.failed = Some(Failure::Protocol(
                        "the reply stream ended before `data: [DONE]`".into(),
                    ));
                }
            }
        }
    }

    /// Reads one event's data into `events`.
    fn read(&mut self, data: &str) -> Result<(), Failure> {
        if data == "[DONE]" {
            self.done = true;
            return Ok(());
        }
        let value: serde_json::Value =
            serde_json::from_str(data).map_err(|e| Failure::Protocol(e.to_string()))?;
        if value.get("error").is_some() {
            let message = error_message(data.as_bytes()).unwrap_or_else(|| data.to_owned());
            return Err(Failure::Stream(message));
        }
        let chunk: ChatCompletionChunk =
            serde_json::from_value(value).map_err(|e| Failure::Protocol(e.to_string()))?;
        if let Some(choice) = chunk.choices.into_iter().next() {
            if let Some(text) = choice.delta.reasoning_content.filter(|t| !t.is_empty()) {
                self.events.push_back(StreamEvent::Reasoning(text));
            }
            if let Some(text) = choice.delta.content.filter(|t| !t.is_empty()) {
                self.events.push_back(StreamEvent::Content(text));
            }
            if let Some(reason) = choice.finish_reason {
                self.events.push_back(StreamEvent::Finish(reason));
            }
        }
        if let Some(Some(usage)) = chunk.usage {
            self.events.push_back(StreamEvent::Usage(usage));
        }
        Ok(())
    }
}

/// The `error.message` of an OpenAI-shaped error body.
fn error_message(body: &[u8]) -> Option<String> {
    serde_json::from_slice::<ErrorBody>(body)
        .ok()
        .map(|b| b.error.message)
}

/// The innermost cause of a reqwest error, such as "Connection refused".
fn root_cause(error: &reqwest::Error) -> String {
    let mut cause: &dyn std::error::Error = error;
    while let Some(next) = cause.source() {
        cause = next;
    }
    let text = cause.to_string();
    if error.is_timeout() {
        format!("timed out ({text})")
    } else {
        text
    }
}

#[cfg(test)]
mod tests {

    use futures::stream;

    use super::*;

    fn chat_stream(chunks: &[&'static str]) -> ChatStream {
        let chunks: Vec<reqwest::Result<Bytes>> = chunks
            .iter()
            .map(|c| Ok(Bytes::from_static(c.as_bytes())))
            .collect();
        ChatStream {
            body: stream::iter(chunks).boxed(),
            decoder: SseDecoder::new(),
            events: VecDeque::new(),
            failed: None,
            done: false,
            api: Api::new(BaseUrl::parse("http://h:1").unwrap(), None).unwrap(),
        }
    }

    async fn drain(mut stream: ChatStream) -> (Vec<StreamEvent>, Option<Failure>) {
        let mut events = Vec::new();
        loop {
            match stream.next().await {
                Ok(Some(event)) => events.push(event),
                Ok(None) => return (events, None),
                Err(failure) => return (events, Some(failure)),
            }
        }
    }

    const FIRST: &str = r#"data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}

"#;

    #[tokio::test]
    async fn chunks_become_events_in_order() {
        let (events, failure) = drain(chat_stream(&[
            FIRST,
            r#"data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"reasoning_content":"Hmm"},"finish_reason":null}]}

data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}

data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}

data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}

data: [D"#,
            "ONE]\n\n",
        ]))
        .await;
        assert!(failure.is_none(), "{failure:?}");
        assert_eq!(
            events,
            [
                StreamEvent::Reasoning("Hmm".into()),
                StreamEvent::Content("Hi".into()),
                StreamEvent::Finish("stop".into()),
                StreamEvent::Usage(Usage {
                    prompt_tokens: 3,
                    completion_tokens: 1,
                    total_tokens: 4,
                    ..Usage::default()
                }),
            ]
        );
    }

    #[tokio::test]
    async fn an_error_event_or_a_cut_stream_fails() {
        let (events, failure) = drain(chat_stream(&[
            FIRST,
            r#"data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}

data: {"error":{"message":"The engine failed.","type":"server_error","param":null,"code":null}}

"#,
        ]))
        .await;
        assert_eq!(events, [StreamEvent::Content("Hi".into())]);
        assert_eq!(
            failure.unwrap().to_string(),
            "the reply failed midway: The engine failed."
        );

        let (_, failure) = drain(chat_stream(&[FIRST])).await;
        assert!(matches!(failure, Some(Failure::Protocol(_))), "{failure:?}");
    }
}
