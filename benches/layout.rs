//! `cargo bench --bench layout`: time of `layout::resolve` on large configs, against the time
//! to parse the same config.json text (a baseline measured in the same run).

use std::hint::black_box;
use std::time::{Duration, Instant};

use kvpilot::layout::{ResolveOptions, resolve};
use serde_json::{Value, json};

/// Median time per call over `rounds` rounds of `iterations` calls.
fn time_per_call(iterations: u32, rounds: usize, mut f: impl FnMut()) -> Duration {
    let mut samples: Vec<Duration> = (0..rounds)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..iterations {
                f();
            }
            start.elapsed() / iterations
        })
        .collect();
    samples.sort();
    samples[rounds / 2]
}

fn large_configs() -> Vec<(&'static str, Value)> {
    let layers = 256;
    let layer_types: Vec<&str> =
        (0..layers).map(|i| if i % 4 == 3 { "full_attention" } else { "sliding_attention" }).collect();
    let pattern: String = (0..layers)
        .map(|i| {
            if i % 8 == 7 {
                '*'
            } else if i % 2 == 0 {
                'M'
            } else {
                '-'
            }
        })
        .collect();
    // Padding fields make the document the size of a big multimodal config.json (~40 KB).
    let padding: serde_json::Map<String, Value> =
        (0..400).map(|i| (format!("unused_field_{i}"), json!([i, "x", 1.5]))).collect();
    let mut gpt_oss = json!({
        "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "num_hidden_layers": layers,
        "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64, "sliding_window": 128,
        "layer_types": layer_types, "torch_dtype": "bfloat16"
    });
    gpt_oss.as_object_mut().unwrap().extend(padding.clone());
    let mut nemotron = json!({
        "architectures": ["NemotronH_Nano_VL_V2"], "model_type": "NemotronH_Nano_VL_V2",
        "llm_config": {
            "num_hidden_layers": layers, "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128,
            "hybrid_override_pattern": pattern, "mamba_num_heads": 128, "mamba_head_dim": 80,
            "ssm_state_size": 128, "n_groups": 8, "conv_kernel": 4
        }
    });
    nemotron.as_object_mut().unwrap().extend(padding);
    vec![("hybrid-swa, 256 layers, 40 KB", gpt_oss), ("nested hybrid-ssm, 256 layers, 40 KB", nemotron)]
}

fn main() {
    println!("layout::resolve on large configs (median of 15 rounds)");
    println!("{:<40} {:>12} {:>16} {:>10}", "config", "resolve", "parse baseline", "ratio");
    for (name, config) in large_configs() {
        let text = serde_json::to_string(&config).unwrap();
        let resolve_time = time_per_call(2_000, 15, || {
            black_box(resolve(black_box(&config), ResolveOptions::default()).unwrap());
        });
        let parse_time = time_per_call(500, 15, || {
            black_box(serde_json::from_str::<Value>(black_box(&text)).unwrap());
        });
        println!(
            "{name:<40} {:>9.2} µs {:>13.2} µs {:>9.3}x",
            resolve_time.as_secs_f64() * 1e6,
            parse_time.as_secs_f64() * 1e6,
            resolve_time.as_secs_f64() / parse_time.as_secs_f64()
        );
    }
}
