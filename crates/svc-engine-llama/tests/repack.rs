//! The engine on `svc-gguf`'s conversions of a tiny Q4_1 model: llama.cpp
//! loads the Q8_0 and Q4_0 copies and replies the same, and with
//! `LlamaEngineOptions::repack` on the engine converts once and reuses the copy.

#![expect(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use futures::StreamExt as _;
use svc_core::engine::{EngineEvent, Sampling};
use svc_engine_llama::testing::TinyModel;
use svc_engine_llama::{CompletionParams, LlamaEngine, LlamaEngineOptions};
use svc_gguf::cache::{MOSTLY, cache_path};
use svc_gguf::repack::{RepackTarget, repack_file};
use svc_gguf::{GGML_TYPE_Q4_1, GgufHeader};

fn tiny_q4_1(dir: &Path) -> PathBuf {
    let path = dir.join("tiny-q4_1.gguf");
    TinyModel::hello()
        .gguf()
        .with_q4_1_matrices()
        .write(&path)
        .unwrap();
    path
}

#[test]
fn llama_cpp_loads_the_result_and_replies_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let source = tiny_q4_1(dir.path());
    assert!(
        GgufHeader::read(&source)
            .unwrap()
            .share_of_type(GGML_TYPE_Q4_1)
            > MOSTLY
    );
    assert!(!LlamaEngineOptions::new(&source).repack, "off by default");
    let reply = |path: &Path, repack: bool| {
        let mut options = LlamaEngineOptions::new(path);
        options.parallel = 1;
        options.context_per_sequence = 256;
        options.threads = Some(2);
        options.repack = repack;
        let engine = LlamaEngine::load(&options).unwrap();
        let prompt = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n";
        let params = CompletionParams {
            sampling: Sampling {
                temperature: 0.0,
                ..Sampling::default()
            },
            max_tokens: Some(40),
            ..CompletionParams::default()
        };
        let mut stream = engine.complete(prompt, params).unwrap();
        let text = futures::executor::block_on(async {
            let mut text = String::new();
            while let Some(event) = stream.next().await {
                if let EngineEvent::Text(t) = event.unwrap() {
                    text.push_str(&t);
                }
            }
            text
        });
        (text, engine.info().clone())
    };
    let expected = TinyModel::hello().reply();
    let (text, info) = reply(&source, false);
    assert_eq!(text, expected);
    assert_eq!(info.loaded_path, source);
    for target in [RepackTarget::Q8_0, RepackTarget::Q4_0] {
        let dest = dir.path().join(format!("tiny-{}.gguf", target.name()));
        repack_file(&source, &dest, target).unwrap();
        let (text, _) = reply(&dest, false);
        assert_eq!(text, expected, "{target:?}");
    }

    // With `repack` on, the engine converts once and reuses the copy.
    let cache = cache_path(&source, RepackTarget::Q8_0);
    assert!(!cache.exists());
    let (text, info) = reply(&source, true);
    assert_eq!(text, expected);
    assert_eq!(info.path, source);
    assert_eq!(info.loaded_path, cache);
    let first = std::fs::metadata(&cache).unwrap().modified().unwrap();
    let (_, info) = reply(&source, true);
    assert_eq!(info.loaded_path, cache);
    assert_eq!(
        std::fs::metadata(&cache).unwrap().modified().unwrap(),
        first
    );
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(!names.iter().any(|n| n.contains(".tmp-")), "{names:?}");
}
