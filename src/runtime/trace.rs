//! `kvpilot bench-cache`: seeded workload traces, an in-process replay that measures the prefix
//! cache, and a backup/restore bandwidth measurement against `memcpy` of the same bytes.
//!
//! Traces are JSONL, one request per line: `{"tokens": [u32, ...]}`.
//! - `gsp`: SGLang `bench_serving`'s generated-shared-prefix shape: G groups, each with one
//!   system prompt of S tokens shared by P prompts that add a Q-token question; shuffled.
//! - `mooncake`: the shape of Mooncake's FAST'25 traces: requests made of 512-token blocks named
//!   by hash ids, where shared ids mean shared prefixes. A few popular system prompts (Zipf),
//!   multi-turn sessions that extend their previous turn, and one-off blocks.

use std::io::{BufRead, Write};
use std::time::{Duration, Instant};

use rand::rngs::Xoshiro256PlusPlus;
use rand::seq::SliceRandom;
use rand::{RngExt, SeedableRng};
use serde::{Deserialize, Serialize};

use super::Component;
use super::arena::Arena;
use super::cache::{BackupMode, Cache, Retraction};
use super::sizing::{HostPool, PoolPlan, TokenPool};

/// Token ids are drawn below this (a Llama-class vocabulary).
pub const VOCAB: u32 = 32_000;

/// Generated-shared-prefix parameters (SGLang's defaults: 64 × 16, 2048 + 128).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GspParams {
    pub groups: usize,
    pub prompts_per_group: usize,
    pub system_len: usize,
    pub question_len: usize,
    pub seed: u64,
}

/// Mooncake-shaped parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MooncakeParams {
    pub requests: usize,
    pub block_size: usize,
    pub seed: u64,
}

fn random_tokens(rng: &mut Xoshiro256PlusPlus, n: usize) -> Vec<u32> {
    (0..n).map(|_| rng.random_range(0..VOCAB)).collect()
}

/// The gsp trace.
pub fn generate_gsp(params: GspParams) -> Vec<Vec<u32>> {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(params.seed);
    let mut requests = Vec::with_capacity(params.groups * params.prompts_per_group);
    for _ in 0..params.groups {
        let system = random_tokens(&mut rng, params.system_len);
        for _ in 0..params.prompts_per_group {
            let mut tokens = system.clone();
            tokens.extend(random_tokens(&mut rng, params.question_len));
            requests.push(tokens);
        }
    }
    requests.shuffle(&mut rng);
    requests
}

/// The tokens of one hash block: deterministic from its id, so equal ids give equal tokens.
fn block_tokens(id: u64, block_size: usize) -> impl Iterator<Item = u32> {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(id.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    (0..block_size).map(move |_| rng.random_range(0..VOCAB))
}

/// The mooncake-shaped trace.
pub fn generate_mooncake(params: MooncakeParams) -> Vec<Vec<u32>> {
    const SYSTEM_PROMPTS: usize = 24;
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(params.seed);
    let mut next_id = 0u64;
    let mut fresh = |n: usize| {
        let ids: Vec<u64> = (next_id..next_id + n as u64).collect();
        next_id += n as u64;
        ids
    };
    let systems: Vec<Vec<u64>> = (0..SYSTEM_PROMPTS).map(|i| fresh(1 + i % 6)).collect();
    // Zipf(1.1) popularity over the system prompts.
    let weights: Vec<f64> = (1..=SYSTEM_PROMPTS).map(|r| 1.0 / (r as f64).powf(1.1)).collect();
    let total: f64 = weights.iter().sum();
    let mut sessions: Vec<Vec<u64>> = Vec::new();
    let mut requests = Vec::with_capacity(params.requests);
    for _ in 0..params.requests {
        let ids = if !sessions.is_empty() && rng.random_range(0.0..1.0) < 0.45 {
            // Another turn of an open session: its history plus a few new blocks.
            let i = rng.random_range(0..sessions.len());
            let turn = 1 + rng.random_range(0..3);
            sessions[i].extend(fresh(turn));
            let ids = sessions[i].clone();
            if ids.len() > 48 || rng.random_range(0.0..1.0) < 0.2 {
                sessions.swap_remove(i);
            }
            ids
        } else {
            let mut pick = rng.random_range(0.0..total);
            let system = weights.iter().position(|w| {
                pick -= w;
                pick < 0.0
            });
            let mut ids = systems[system.unwrap_or(0)].clone();
            let user = 1 + rng.random_range(0..6);
            ids.extend(fresh(user));
            if rng.random_range(0.0..1.0) < 0.5 {
                sessions.push(ids.clone());
            }
            ids
        };
        requests.push(ids.iter().flat_map(|id| block_tokens(*id, params.block_size)).collect());
    }
    requests
}

#[derive(Serialize, Deserialize)]
struct TraceLine {
    tokens: Vec<u32>,
}

/// Writes a trace as JSONL.
pub fn write_trace(requests: &[Vec<u32>], out: &mut impl Write) -> std::io::Result<()> {
    for tokens in requests {
        serde_json::to_writer(&mut *out, &TraceLine { tokens: tokens.clone() })?;
        out.write_all(b"\n")?;
    }
    out.flush()
}

/// Reads a JSONL trace; errors name the line.
pub fn read_trace(input: impl BufRead, origin: &str) -> Result<Vec<Vec<u32>>, String> {
    let mut requests = Vec::new();
    for (i, line) in input.lines().enumerate() {
        let line = line.map_err(|e| format!("{origin}: line {}: {e}", i + 1))?;
        if line.trim().is_empty() {
            continue;
        }
        let parsed: TraceLine = serde_json::from_str(&line)
            .map_err(|e| format!("{origin}: line {}: {e}; expected {{\"tokens\": [u32, ...]}}", i + 1))?;
        requests.push(parsed.tokens);
    }
    if requests.is_empty() {
        return Err(format!("{origin}: the trace has no requests"));
    }
    Ok(requests)
}

/// What a replay measured (the median round, by match p50).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplayReport {
    pub requests: usize,
    pub tokens: usize,
    pub hit_rate: f64,
    pub match_p50_us: f64,
    pub match_p99_us: f64,
    pub insert_p50_us: f64,
    pub total_seconds: f64,
    pub page_size: usize,
    pub capacity_tokens: usize,
    pub mean_matched_tokens: f64,
    pub rounds: usize,
    /// The memory floor, measured in the same run: p50 of comparing each request's matched
    /// tokens with a copy of them, both out of cache (what any exact prefix match must read).
    pub floor_compare_p50_us: f64,
    /// `matchP50Us / floorCompareP50Us`.
    pub match_vs_floor: f64,
}

fn percentile_us(sorted: &[Duration], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let index = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[index].as_secs_f64() * 1e6
}

/// A cache with one full-attention pool and no bytes: the tree and allocators alone.
fn metadata_cache(page_size: usize, capacity_tokens: usize) -> Result<Cache, String> {
    let plan = PoolPlan {
        page_size,
        window: None,
        full: Some(TokenPool { layers: 1, bytes_per_token: 0, pages: capacity_tokens / page_size }),
        swa: None,
        ssm: None,
        host: None,
        cpu_backup_limit: None,
    };
    Cache::new(plan, BackupMode::CpuTensor, true)
}

/// One replay on a fresh cache: its report, and how many tokens each request matched.
fn replay_once(
    requests: &[Vec<u32>],
    page_size: usize,
    capacity_tokens: usize,
) -> Result<(ReplayReport, Vec<usize>), String> {
    let mut cache = metadata_cache(page_size, capacity_tokens)?;
    let (mut matches, mut inserts) = (Vec::with_capacity(requests.len()), Vec::with_capacity(requests.len()));
    let mut matched_per_request = Vec::with_capacity(requests.len());
    let (mut tokens, mut matched) = (0usize, 0usize);
    let started = Instant::now();
    for (i, request) in requests.iter().enumerate() {
        let id = format!("r{i}");
        let t0 = Instant::now();
        let m = cache.match_prefix(&id, "", request).map_err(|e| format!("request {i}: {e}"))?;
        matches.push(t0.elapsed());
        cache.allocate(&id, "", request.len() - m.matched_tokens).map_err(|e| format!("request {i}: {e}"))?;
        let t1 = Instant::now();
        cache.insert(&id, request).map_err(|e| format!("request {i}: {e}"))?;
        inserts.push(t1.elapsed());
        cache.release(&id).map_err(|e| format!("request {i}: {e}"))?;
        tokens += request.len();
        matched += m.matched_tokens;
        matched_per_request.push(m.matched_tokens);
    }
    let total = started.elapsed();
    matches.sort_unstable();
    inserts.sort_unstable();
    let report = ReplayReport {
        requests: requests.len(),
        tokens,
        hit_rate: matched as f64 / tokens.max(1) as f64,
        match_p50_us: percentile_us(&matches, 0.5),
        match_p99_us: percentile_us(&matches, 0.99),
        insert_p50_us: percentile_us(&inserts, 0.5),
        total_seconds: total.as_secs_f64(),
        page_size,
        capacity_tokens: capacity_tokens / page_size * page_size,
        mean_matched_tokens: matched as f64 / requests.len().max(1) as f64,
        rounds: 1,
        floor_compare_p50_us: 0.0,
        match_vs_floor: 0.0,
    };
    Ok((report, matched_per_request))
}

/// p50 of comparing each request's first `matched[i]` tokens with a copy made before any of
/// them is compared, so both sides come from memory as they do in a replay.
fn floor_compare_p50_us(requests: &[Vec<u32>], matched: &[usize]) -> f64 {
    let copies: Vec<Vec<u32>> = requests.to_vec();
    let mut times: Vec<Duration> = requests
        .iter()
        .zip(&copies)
        .zip(matched)
        .map(|((request, copy), &n)| {
            let t0 = Instant::now();
            let equal = std::hint::black_box(&request[..n]) == std::hint::black_box(&copy[..n]);
            let elapsed = t0.elapsed();
            std::hint::black_box(equal);
            elapsed
        })
        .collect();
    times.sort_unstable();
    percentile_us(&times, 0.5)
}

/// Replays a trace in-process on metadata-only caches, `rounds` times on a fresh cache each:
/// per request match, allocate the rest, insert, release; allocation evicts when the pool is
/// full. Reports the median round by match p50, and the memory floor of the same run.
pub fn replay(
    requests: &[Vec<u32>],
    page_size: usize,
    capacity_tokens: usize,
    rounds: usize,
) -> Result<ReplayReport, String> {
    let page_size = page_size.max(1);
    let rounds = rounds.max(1);
    let mut rounds_run =
        (0..rounds).map(|_| replay_once(requests, page_size, capacity_tokens)).collect::<Result<Vec<_>, _>>()?;
    rounds_run.sort_by(|a, b| a.0.match_p50_us.total_cmp(&b.0.match_p50_us));
    // Every round starts from an empty cache, so every round matches the same tokens.
    let (mut report, matched) = rounds_run.swap_remove(rounds / 2);
    report.rounds = rounds;
    report.floor_compare_p50_us = floor_compare_p50_us(requests, &matched);
    report.match_vs_floor = report.match_p50_us / report.floor_compare_p50_us.max(1e-3);
    Ok(report)
}

/// Backup/restore bandwidth parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransferParams {
    pub requests: usize,
    pub request_tokens: usize,
    pub page_size: usize,
    pub bytes_per_token: u64,
    pub rounds: usize,
}

/// What the transfer measurement found.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TransferReport {
    pub bytes_per_round: usize,
    pub page_size: usize,
    pub memcpy_gb_per_s: f64,
    pub backup_gb_per_s: f64,
    pub restore_gb_per_s: f64,
    pub backup_vs_memcpy: f64,
    pub restore_vs_memcpy: f64,
    pub verified: bool,
}

fn gbps(bytes: usize, elapsed: Duration) -> f64 {
    bytes as f64 / elapsed.as_secs_f64().max(1e-9) / 1e9
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

/// Fills `requests` requests with a pattern, retracts them all into the host pool and restores
/// them, `rounds` times; reports median bandwidths and the median per-round ratio against
/// `memcpy` of the same byte count between two buffers of the same size, measured in the same
/// round. Every restore is verified byte for byte.
pub fn transfer(params: TransferParams) -> Result<TransferReport, String> {
    let p = params.page_size.max(1);
    let pages_per_request = params.request_tokens.div_ceil(p);
    let pages = pages_per_request * params.requests;
    let plan = PoolPlan {
        page_size: p,
        window: None,
        full: Some(TokenPool { layers: 1, bytes_per_token: params.bytes_per_token, pages }),
        swa: None,
        ssm: None,
        host: Some(HostPool { full_pages: pages, swa_pages: 0 }),
        cpu_backup_limit: None,
    };
    let mut cache = Cache::new(plan, BackupMode::HostPool, false)?;
    cache.prefault();
    let page_bytes = p * params.bytes_per_token as usize;
    let bytes = pages * page_bytes;
    let src = Arena::zeroed(bytes).map_err(|e| e.to_string())?;
    let dst = Arena::zeroed(bytes).map_err(|e| e.to_string())?;
    src.prefault();
    dst.prefault();

    let (mut memcpy, mut backup, mut restore) = (Vec::new(), Vec::new(), Vec::new());
    let mut verified = true;
    let timeout = Duration::from_secs(120);
    for round in 0..params.rounds.max(1) {
        let started = Instant::now();
        Arena::copy(&src, 0, &dst, 0, bytes);
        memcpy.push(gbps(bytes, started.elapsed()));

        let mut patterns = Vec::new();
        for r in 0..params.requests {
            let id = format!("r{r}");
            let allocated = cache.allocate(&id, "", pages_per_request * p).map_err(|e| e.to_string())?;
            let fill = (round * 31 + r * 7 + 1) as u8;
            let data: Vec<u8> =
                (0..pages_per_request * page_bytes).map(|i| fill.wrapping_add((i / 4096) as u8)).collect();
            cache.write(Component::Full, &allocated.pages.full, &data).map_err(|e| e.to_string())?;
            patterns.push((id, data));
        }
        let started = Instant::now();
        let mut tickets = Vec::new();
        for (id, _) in &patterns {
            match cache.retract(id).map_err(|e| e.to_string())? {
                Retraction::BackingUp { ticket, .. } => tickets.push(ticket),
                Retraction::Declined { reason } => return Err(format!("backup declined: {reason}")),
            }
        }
        for ticket in &tickets {
            if !cache.wait(*ticket, timeout) {
                return Err("a backup did not finish".into());
            }
        }
        backup.push(gbps(bytes, started.elapsed()));
        cache.poll(&tickets);

        let started = Instant::now();
        let mut restored = Vec::new();
        for (id, _) in &patterns {
            let restoration = cache.restore(id).map_err(|e| e.to_string())?;
            restored.push((restoration.ticket, restoration.pages.full));
        }
        for (ticket, _) in &restored {
            if !cache.wait(*ticket, timeout) {
                return Err("a restore did not finish".into());
            }
        }
        restore.push(gbps(bytes, started.elapsed()));
        let tickets: Vec<u64> = restored.iter().map(|(t, _)| *t).collect();
        cache.poll(&tickets);
        for ((id, data), (_, pages)) in patterns.iter().zip(&restored) {
            verified &= cache.read(Component::Full, pages).map_err(|e| e.to_string())? == *data;
            cache.release(id).map_err(|e| e.to_string())?;
        }
        cache.check_invariants()?;
    }
    // Each round's copies are compared with the memcpy measured just before them, so a noisy
    // neighbour slows both sides of one ratio rather than skewing medians taken apart.
    let ratios = |of: &[f64]| median(of.iter().zip(&memcpy).map(|(x, m)| x / m.max(1e-9)).collect());
    let (backup_vs_memcpy, restore_vs_memcpy) = (ratios(&backup), ratios(&restore));
    Ok(TransferReport {
        bytes_per_round: bytes,
        page_size: p,
        memcpy_gb_per_s: median(memcpy),
        backup_gb_per_s: median(backup),
        restore_gb_per_s: median(restore),
        backup_vs_memcpy,
        restore_vs_memcpy,
        verified,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gsp_traces_are_seeded_and_shaped_like_sglang_s() {
        let params = GspParams { groups: 4, prompts_per_group: 4, system_len: 64, question_len: 8, seed: 1 };
        let trace = generate_gsp(params);
        assert_eq!(trace, generate_gsp(params), "the same seed gives the same trace");
        assert_ne!(trace, generate_gsp(GspParams { seed: 2, ..params }));
        assert_eq!(trace.len(), 16);
        assert!(trace.iter().all(|t| t.len() == 72 && t.iter().all(|id| *id < VOCAB)));
        let mut systems: Vec<&[u32]> = trace.iter().map(|t| &t[..64]).collect();
        systems.sort();
        systems.dedup();
        assert_eq!(systems.len(), 4, "four shared system prompts");
    }

    #[test]
    fn a_replay_reuses_every_shared_system_prompt() {
        let trace =
            generate_gsp(GspParams { groups: 4, prompts_per_group: 4, system_len: 64, question_len: 8, seed: 3 });
        let report = replay(&trace, 1, 1 << 16, 1).unwrap();
        // Every prompt after a group's first reuses its 64-token system prompt.
        let floor = (4 * 3 * 64) as f64 / (16 * 72) as f64;
        assert!(report.hit_rate >= floor && report.hit_rate < floor + 0.01, "{report:?}");
        assert_eq!((report.requests, report.tokens), (16, 16 * 72));
        let tight = replay(&trace, 4, 96, 1).unwrap();
        assert!(tight.hit_rate < report.hit_rate, "a pool of 96 tokens evicts prompts before they are reused");
    }

    #[test]
    fn mooncake_traces_share_blocks_by_hash_id() {
        let params = MooncakeParams { requests: 200, block_size: 16, seed: 5 };
        let trace = generate_mooncake(params);
        assert_eq!(trace, generate_mooncake(params));
        assert!(trace.iter().all(|t| !t.is_empty() && t.len().is_multiple_of(16)));
        let report = replay(&trace, 16, 1 << 20, 1).unwrap();
        assert!(report.hit_rate > 0.3 && report.hit_rate < 0.95, "shared prompts and sessions, some fresh: {report:?}");
    }

    #[test]
    fn traces_round_trip_through_jsonl_and_bad_lines_are_named() {
        let trace = vec![vec![1, 2, 3], vec![4]];
        let mut out = Vec::new();
        write_trace(&trace, &mut out).unwrap();
        assert_eq!(read_trace(out.as_slice(), "t").unwrap(), trace);
        let error = read_trace(&b"{\"tokens\": [1]}\n{\"tokens\": [-1]}\n"[..], "t.jsonl").unwrap_err();
        assert!(error.starts_with("t.jsonl: line 2:"), "{error}");
        assert!(read_trace(&b"\n"[..], "empty").unwrap_err().contains("no requests"));
    }
}
