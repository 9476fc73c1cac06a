//! The CPU check: llama.cpp is compiled for a fixed set of x86 SIMD
//! extensions (see `build.rs` and the workspace `.cargo/config.toml`), and
//! calling into it on a CPU without them dies with an illegal instruction.
//! This module refuses, with a message naming what is missing, before any
//! llama.cpp code runs. It must not call into llama.cpp itself.

/// The extensions llama.cpp was compiled with, comma-separated, or `native`.
const COMPILED_WITH: &str = env!("SVC_LLAMA_CPU_FEATURES");

/// The SIMD extensions this build of llama.cpp needs, as `is_x86_feature_detected!` names them.
pub fn required_features() -> Vec<&'static str> {
    COMPILED_WITH
        .split(',')
        .filter(|f| !f.is_empty() && *f != "native")
        .collect()
}

/// Checks that this CPU has every extension llama.cpp was compiled with.
///
/// Returns a message for the operator when one is missing.
pub fn check() -> Result<(), String> {
    let missing: Vec<&str> = required_features()
        .into_iter()
        .filter(|f| has_feature(f) == Some(false))
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "this CPU lacks {} which the embedded llama.cpp was compiled for \
             (it needs {}); rebuild svc with those GGML_* options off in \
             .cargo/config.toml, or serve models from an upstream engine",
            missing.join(", "),
            COMPILED_WITH
        ))
    }
}

/// Whether this CPU has `feature`; `None` where it cannot be asked here.
fn has_feature(feature: &str) -> Option<bool> {
    #[cfg(target_arch = "x86_64")]
    {
        let present = match feature {
            "sse4.2" => std::arch::is_x86_feature_detected!("sse4.2"),
            "avx" => std::arch::is_x86_feature_detected!("avx"),
            "avx2" => std::arch::is_x86_feature_detected!("avx2"),
            "bmi2" => std::arch::is_x86_feature_detected!("bmi2"),
            "fma" => std::arch::is_x86_feature_detected!("fma"),
            "f16c" => std::arch::is_x86_feature_detected!("f16c"),
            "avxvnni" => std::arch::is_x86_feature_detected!("avxvnni"),
            "avx512f" => std::arch::is_x86_feature_detected!("avx512f"),
            "avx512vbmi" => std::arch::is_x86_feature_detected!("avx512vbmi"),
            "avx512vnni" => std::arch::is_x86_feature_detected!("avx512vnni"),
            "avx512bf16" => std::arch::is_x86_feature_detected!("avx512bf16"),
            _ => return None,
        };
        Some(present)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = feature;
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_machine_runs_the_build() {
        assert_eq!(check(), Ok(()));
    }

    #[test]
    fn every_recorded_feature_is_known() {
        #[cfg(target_arch = "x86_64")]
        for feature in required_features() {
            assert!(has_feature(feature).is_some(), "{feature}");
        }
    }
}
