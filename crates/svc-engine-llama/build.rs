//! Records which x86 SIMD extensions llama.cpp is compiled with, so the
//! engine can check the CPU for exactly those before it calls into llama.cpp.
//!
//! The `llama-cpp-sys-2` build script forwards every `GGML_*` environment
//! variable to CMake (the workspace sets them in `.cargo/config.toml`); where
//! one is unset, ggml's own default applies: SSE4.2, AVX, AVX2, BMI2, FMA and
//! F16C on, unless `SOURCE_DATE_EPOCH` is set (then ggml turns them off).

use std::env;

/// `GGML_*` option, the `is_x86_feature_detected!` name, ggml's default.
const OPTIONS: &[(&str, &str, bool)] = &[
    ("GGML_SSE42", "sse4.2", true),
    ("GGML_AVX", "avx", true),
    ("GGML_AVX2", "avx2", true),
    ("GGML_BMI2", "bmi2", true),
    ("GGML_FMA", "fma", true),
    ("GGML_F16C", "f16c", true),
    ("GGML_AVX_VNNI", "avxvnni", false),
    ("GGML_AVX512", "avx512f", false),
    ("GGML_AVX512_VBMI", "avx512vbmi", false),
    ("GGML_AVX512_VNNI", "avx512vnni", false),
    ("GGML_AVX512_BF16", "avx512bf16", false),
];

fn main() {
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
    let defaults_on = env::var_os("SOURCE_DATE_EPOCH").is_none();
    let mut features = Vec::new();
    for &(option, feature, default) in OPTIONS {
        println!("cargo:rerun-if-env-changed={option}");
        let on = match env::var(option) {
            Ok(value) => matches!(
                value.to_ascii_uppercase().as_str(),
                "ON" | "1" | "TRUE" | "YES" | "Y"
            ),
            Err(_) => default && defaults_on,
        };
        if on {
            features.push(feature);
        }
    }
    // `-C target-cpu=native` makes llama-cpp-sys-2 build ggml with
    // GGML_NATIVE ("whatever the build machine has"): nothing to check.
    let native = env::var("CARGO_ENCODED_RUSTFLAGS").is_ok_and(|flags| {
        flags
            .split('\x1f')
            .any(|f| f.ends_with("target-cpu=native"))
    });
    let value = if native {
        "native".to_owned()
    } else {
        features.join(",")
    };
    println!("cargo:rustc-env=SVC_LLAMA_CPU_FEATURES={value}");
}
