//! What an engine offers: one trait for each kind of work a model does
//! ([`Generator`], [`Embedder`], [`Reranker`], [`Transcriber`], [`Speaker`]),
//! and [`Engine`], which says which of them its model has.
//!
//! None of [`Engine`]'s accessors has a default: every engine says, for
//! each capability, whether it offers it. An engine that wraps another (a
//! model loaded on demand) cannot miss one without writing so, and a new
//! capability reaches every engine through the compiler's errors, not
//! through a default that refuses. The server asks for a capability with
//! [`Engine::generating`] and its siblings, so that a model asked for work
//! it does not do gets the same error on every endpoint.

use async_trait::async_trait;

use super::{
    EmbedRequest, Embeddings, EngineError, EngineStatus, EventStream, GenerateRequest,
    RerankRequest, Reranked, Residence, Speech, SpeechRequest, TranscribeRequest, Transcript,
};

/// A kind of work a model does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Capability {
    /// Chat and text completions: [`Generator`].
    Generation,
    /// Generation that reads the messages' images: a [`Generator`] whose
    /// [`Generator::sees_images`] says so.
    Vision,
    /// Vectors of texts: [`Embedder`].
    Embedding,
    /// Documents ordered by relevance to a query: [`Reranker`].
    Reranking,
    /// Text of audio: [`Transcriber`].
    Transcription,
    /// Audio of text: [`Speaker`].
    Speech,
}

impl Capability {
    /// Every capability, in the order [`Engine::offered`] lists them.
    pub const ALL: [Capability; 6] = [
        Capability::Generation,
        Capability::Vision,
        Capability::Embedding,
        Capability::Reranking,
        Capability::Transcription,
        Capability::Speech,
    ];

    /// `generation`, `vision`, `embeddings`, `rerank`, `transcription`,
    /// `speech`.
    pub fn as_str(self) -> &'static str {
        match self {
            Capability::Generation => "generation",
            Capability::Vision => "vision",
            Capability::Embedding => "embeddings",
            Capability::Reranking => "rerank",
            Capability::Transcription => "transcription",
            Capability::Speech => "speech",
        }
    }

    /// What a model that lacks it does not do, for the client's error.
    fn work(self) -> &'static str {
        match self {
            Capability::Generation => "generate text",
            Capability::Vision => "take images (it has no vision)",
            Capability::Embedding => "create embeddings",
            Capability::Reranking => "rerank documents",
            Capability::Transcription => "transcribe audio",
            Capability::Speech => "synthesize speech",
        }
    }

    /// Where a client asks for it.
    fn endpoint(self) -> &'static str {
        match self {
            Capability::Generation | Capability::Vision => "POST /v1/chat/completions",
            Capability::Embedding => "POST /v1/embeddings",
            Capability::Reranking => "POST /v1/rerank",
            Capability::Transcription => "POST /v1/audio/transcriptions",
            Capability::Speech => "POST /v1/audio/speech",
        }
    }
}

/// Generates text: chat and legacy completions.
#[async_trait]
pub trait Generator: Send + Sync {
    /// Starts a generation. An error here means nothing was generated.
    async fn generate(&self, request: GenerateRequest) -> Result<EventStream, EngineError>;

    /// How many prompt tokens `request` would use (its messages and tools,
    /// with the model's markup). An engine that cannot tokenize gives the
    /// estimate ([`super::estimate_tokens`]).
    async fn count_tokens(&self, request: &GenerateRequest) -> Result<u64, EngineError>;

    /// Whether it reads the images of the messages ([`Capability::Vision`]);
    /// one that does not refuses a request with images
    /// ([`super::refuse_images`]).
    fn sees_images(&self) -> bool;
}

/// Turns texts (or token ids) into vectors.
#[async_trait]
pub trait Embedder: Send + Sync {
    /// The vectors of `request`'s inputs.
    async fn embed(&self, request: EmbedRequest) -> Result<Embeddings, EngineError>;
}

/// Scores documents by their relevance to a query.
#[async_trait]
pub trait Reranker: Send + Sync {
    /// The relevance of each of `request`'s documents to its query.
    async fn rerank(&self, request: RerankRequest) -> Result<Reranked, EngineError>;
}

/// Turns speech into text.
#[async_trait]
pub trait Transcriber: Send + Sync {
    /// The text of `request`'s audio.
    async fn transcribe(&self, request: TranscribeRequest) -> Result<Transcript, EngineError>;
}

/// Turns text into speech.
#[async_trait]
pub trait Speaker: Send + Sync {
    /// `request`'s text spoken.
    async fn speak(&self, request: SpeechRequest) -> Result<Speech, EngineError>;
}

/// A model as the server sees it: what it offers (one accessor a
/// capability, none with a default), its name, health and residence.
pub trait Engine: Send + Sync + 'static {
    /// Its generation, if its model generates text.
    fn generator(&self) -> Option<&dyn Generator>;

    /// Its embeddings, if its model makes them.
    fn embedder(&self) -> Option<&dyn Embedder>;

    /// Its reranking, if its model reranks.
    fn reranker(&self) -> Option<&dyn Reranker>;

    /// Its transcription, if its model transcribes.
    fn transcriber(&self) -> Option<&dyn Transcriber>;

    /// Its speech, if its model speaks.
    fn speaker(&self) -> Option<&dyn Speaker>;

    /// A short name for logs and metrics (`llama`, `upstream`, ...).
    fn name(&self) -> &str;

    /// `system_fingerprint` of the replies: an id of the weights, the
    /// engine build and the numeric settings, which changes only when one
    /// of them does. `None` where the engine cannot say (an upstream).
    fn fingerprint(&self) -> Option<String> {
        None
    }

    /// What the engine is doing now, for metrics.
    fn status(&self) -> EngineStatus {
        EngineStatus::default()
    }

    /// The model's residence, for an engine whose model is loaded and
    /// unloaded while the server runs (a local model): the admin API loads
    /// and unloads it through this. `None`: always there (an upstream).
    fn residence(&self) -> Option<&dyn Residence> {
        None
    }
}

/// The five capability accessors of an [`Engine`] that does the work
/// itself: each capability listed answers `Some(self)` (the type must
/// implement its trait), every other `None`. Written inside the `impl
/// Engine`: `svc_core::offers!(generator, embedder);`. An engine that
/// hands work on to another (a wrapper) forwards each accessor by hand
/// instead.
#[macro_export]
macro_rules! offers {
    ($($capability:ident),* $(,)?) => {
        fn generator(&self) -> Option<&dyn $crate::engine::Generator> {
            $crate::__offer!(self, generator; $($capability),*)
        }
        fn embedder(&self) -> Option<&dyn $crate::engine::Embedder> {
            $crate::__offer!(self, embedder; $($capability),*)
        }
        fn reranker(&self) -> Option<&dyn $crate::engine::Reranker> {
            $crate::__offer!(self, reranker; $($capability),*)
        }
        fn transcriber(&self) -> Option<&dyn $crate::engine::Transcriber> {
            $crate::__offer!(self, transcriber; $($capability),*)
        }
        fn speaker(&self) -> Option<&dyn $crate::engine::Speaker> {
            $crate::__offer!(self, speaker; $($capability),*)
        }
    };
}

/// [`offers!`]'s test of one accessor against the list: `Some(self)`
/// where it is named, `None` where not, and a compile error for a name
/// that is no capability.
#[doc(hidden)]
#[macro_export]
macro_rules! __offer {
    ($this:tt, $want:ident;) => {
        None
    };
    ($this:tt, generator; generator $(, $rest:ident)*) => { Some($this) };
    ($this:tt, embedder; embedder $(, $rest:ident)*) => { Some($this) };
    ($this:tt, reranker; reranker $(, $rest:ident)*) => { Some($this) };
    ($this:tt, transcriber; transcriber $(, $rest:ident)*) => { Some($this) };
    ($this:tt, speaker; speaker $(, $rest:ident)*) => { Some($this) };
    ($this:tt, $want:ident; generator $(, $rest:ident)*) => { $crate::__offer!($this, $want; $($rest),*) };
    ($this:tt, $want:ident; embedder $(, $rest:ident)*) => { $crate::__offer!($this, $want; $($rest),*) };
    ($this:tt, $want:ident; reranker $(, $rest:ident)*) => { $crate::__offer!($this, $want; $($rest),*) };
    ($this:tt, $want:ident; transcriber $(, $rest:ident)*) => { $crate::__offer!($this, $want; $($rest),*) };
    ($this:tt, $want:ident; speaker $(, $rest:ident)*) => { $crate::__offer!($this, $want; $($rest),*) };
}

impl dyn Engine {
    /// Whether it offers `capability`.
    pub fn offers(&self, capability: Capability) -> bool {
        match capability {
            Capability::Generation => self.generator().is_some(),
            Capability::Vision => self.generator().is_some_and(|g| g.sees_images()),
            Capability::Embedding => self.embedder().is_some(),
            Capability::Reranking => self.reranker().is_some(),
            Capability::Transcription => self.transcriber().is_some(),
            Capability::Speech => self.speaker().is_some(),
        }
    }

    /// The capabilities it offers, in [`Capability::ALL`]'s order.
    pub fn offered(&self) -> Vec<Capability> {
        Capability::ALL
            .into_iter()
            .filter(|&c| self.offers(c))
            .collect()
    }

    /// The client's error for asking `model` (this engine's id) for
    /// `wanted`, which it does not offer: `InvalidRequest` naming `model`,
    /// saying where what it does offer is asked for.
    pub fn refusal(&self, model: &str, wanted: Capability) -> EngineError {
        let offered: Vec<Capability> = self
            .offered()
            .into_iter()
            .filter(|&c| c != Capability::Vision)
            .collect();
        let instead = match offered.as_slice() {
            [] => String::new(),
            [only] => format!("; it serves {} ({})", only.as_str(), only.endpoint()),
            many => format!(
                "; it serves {}",
                many.iter()
                    .map(|c| format!("{} ({})", c.as_str(), c.endpoint()))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        EngineError::InvalidRequest {
            param: Some("model".to_owned()),
            message: format!("model {model} does not {}{instead}", wanted.work()),
        }
    }

    /// Its [`Generator`], or the error for asking `model` for text.
    pub fn generating(&self, model: &str) -> Result<&dyn Generator, EngineError> {
        self.generator()
            .ok_or_else(|| self.refusal(model, Capability::Generation))
    }

    /// Its [`Embedder`], or the error for asking `model` for embeddings.
    pub fn embedding(&self, model: &str) -> Result<&dyn Embedder, EngineError> {
        self.embedder()
            .ok_or_else(|| self.refusal(model, Capability::Embedding))
    }

    /// Its [`Reranker`], or the error for asking `model` to rerank.
    pub fn reranking(&self, model: &str) -> Result<&dyn Reranker, EngineError> {
        self.reranker()
            .ok_or_else(|| self.refusal(model, Capability::Reranking))
    }

    /// Its [`Transcriber`], or the error for asking `model` for a transcript.
    pub fn transcribing(&self, model: &str) -> Result<&dyn Transcriber, EngineError> {
        self.transcriber()
            .ok_or_else(|| self.refusal(model, Capability::Transcription))
    }

    /// Its [`Speaker`], or the error for asking `model` for speech.
    pub fn speaking(&self, model: &str) -> Result<&dyn Speaker, EngineError> {
        self.speaker()
            .ok_or_else(|| self.refusal(model, Capability::Speech))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::estimate_tokens;

    struct Embeds;

    #[async_trait]
    impl Embedder for Embeds {
        async fn embed(&self, _: EmbedRequest) -> Result<Embeddings, EngineError> {
            Ok(Embeddings {
                vectors: Vec::new(),
                prompt_tokens: 0,
            })
        }
    }

    impl Engine for Embeds {
        crate::offers!(embedder);
        fn name(&self) -> &str {
            "embeds"
        }
    }

    struct Chats {
        images: bool,
    }

    #[async_trait]
    impl Generator for Chats {
        async fn generate(&self, _: GenerateRequest) -> Result<EventStream, EngineError> {
            Err(EngineError::Unavailable("not here".into()))
        }
        async fn count_tokens(&self, request: &GenerateRequest) -> Result<u64, EngineError> {
            Ok(estimate_tokens(request))
        }
        fn sees_images(&self) -> bool {
            self.images
        }
    }

    impl Engine for Chats {
        crate::offers!(generator);
        fn name(&self) -> &str {
            "chats"
        }
    }

    #[test]
    fn an_engine_offers_what_its_accessors_give() {
        let embeds: &dyn Engine = &Embeds;
        assert_eq!(embeds.offered(), vec![Capability::Embedding]);
        let chats: &dyn Engine = &Chats { images: false };
        assert_eq!(chats.offered(), vec![Capability::Generation]);
        let sees: &dyn Engine = &Chats { images: true };
        assert_eq!(
            sees.offered(),
            vec![Capability::Generation, Capability::Vision]
        );
    }

    #[test]
    fn a_model_asked_for_work_it_does_not_do_names_model_and_what_it_serves() {
        let embeds: &dyn Engine = &Embeds;
        let Err(EngineError::InvalidRequest { param, message }) = embeds.generating("e5") else {
            panic!("an embedding model generated");
        };
        assert_eq!(param.as_deref(), Some("model"));
        assert_eq!(
            message,
            "model e5 does not generate text; it serves embeddings (POST /v1/embeddings)"
        );
        let chats: &dyn Engine = &Chats { images: true };
        let Err(EngineError::InvalidRequest { message, .. }) = chats.reranking("svc") else {
            panic!("a chat model reranked");
        };
        assert_eq!(
            message,
            "model svc does not rerank documents; it serves generation (POST /v1/chat/completions)"
        );
        assert!(chats.generating("svc").is_ok());
        assert!(embeds.embedding("e5").is_ok());
    }
}
