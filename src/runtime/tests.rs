//! Cache semantics, one behaviour per test, each ending with the full invariant audit.

use std::time::Duration;

use super::Component;
use super::cache::{Amounts, BackupMode, Cache, CacheError, Retraction, TicketStatus};
use super::sizing::{HostPool, PoolPlan, StatePool, TokenPool};

const WAIT: Duration = Duration::from_secs(10);

/// Bytes per token small enough to compare whole pools in tests.
const FULL_BYTES: u64 = 8;
const SWA_BYTES: u64 = 4;
const SSM_BYTES: u64 = 16;

pub(super) fn plan(page_size: usize, full: usize, swa: Option<(usize, usize)>, ssm: Option<usize>) -> PoolPlan {
    PoolPlan {
        page_size,
        window: swa.map(|(_, window)| window),
        full: (full > 0).then_some(TokenPool { layers: 1, bytes_per_token: FULL_BYTES, pages: full }),
        swa: swa.map(|(pages, _)| TokenPool { layers: 1, bytes_per_token: SWA_BYTES, pages }),
        ssm: ssm.map(|slots| StatePool { layers: 1, bytes_per_slot: SSM_BYTES, slots }),
        host: None,
        cpu_backup_limit: None,
    }
}

pub(super) fn with_host(mut plan: PoolPlan, full: usize, swa: usize) -> PoolPlan {
    plan.host = Some(HostPool { full_pages: full, swa_pages: swa });
    plan
}

fn cache(plan: PoolPlan, mode: BackupMode) -> Cache {
    Cache::new(plan, mode, false).unwrap()
}

fn audit(cache: &Cache) {
    if let Err(e) = cache.check_invariants() {
        panic!("invariant broken: {e}");
    }
}

fn seq(start: u32, n: usize) -> Vec<u32> {
    (start..start + n as u32).collect()
}

/// match + allocate the rest + insert + release, as a finished request does.
fn serve(cache: &mut Cache, id: &str, tokens: &[u32]) -> usize {
    let matched = cache.match_prefix(id, "", tokens).unwrap().matched_tokens;
    cache.allocate(id, "", tokens.len() - matched).unwrap();
    cache.insert(id, tokens).unwrap();
    cache.release(id).unwrap();
    matched
}

fn pool(cache: &mut Cache, component: &str) -> super::cache::PoolStats {
    cache.stats().pools[component]
}

#[test]
fn a_second_request_reuses_the_cached_prefix_and_sees_the_same_pages() {
    let mut c = cache(plan(1, 64, None, None), BackupMode::CpuTensor);
    let first = seq(100, 10);
    assert_eq!(serve(&mut c, "a", &first), 0);
    let mut second = first[..6].to_vec();
    second.extend([7, 8, 9]);
    let matched = c.match_prefix("b", "", &second).unwrap();
    assert_eq!(matched.matched_tokens, 6, "the shared prefix, split out of the cached node");
    let cached = c.describe("b").unwrap();
    assert_eq!(cached.cached_tokens, 6);
    assert_eq!(matched.pages.full, cached.pages.full);
    audit(&c);
    let stats = pool(&mut c, "full");
    assert_eq!((stats.protected_tokens, stats.evictable_tokens, stats.free_tokens), (6, 4, 54));
    c.release("b").unwrap();
    audit(&c);
    assert_eq!(c.totals().hit_tokens, 6);
}

#[test]
fn pages_longer_than_a_token_match_whole_pages_only() {
    let mut c = cache(plan(4, 16, None, None), BackupMode::CpuTensor);
    let tokens = seq(1, 11);
    serve(&mut c, "a", &tokens);
    assert_eq!(pool(&mut c, "full").evictable_tokens, 8, "the unaligned tail is not cached");
    let mut probe = tokens[..6].to_vec();
    probe.extend([50, 51]);
    assert_eq!(c.match_prefix("b", "", &probe).unwrap().matched_tokens, 4, "token 6 differs inside page 2");
    audit(&c);
}

#[test]
fn an_insert_frees_pages_that_duplicate_cached_ones() {
    let mut c = cache(plan(1, 32, None, None), BackupMode::CpuTensor);
    let tokens = seq(1, 8);
    // Both requests computed the same KV before either was cached.
    for id in ["a", "b"] {
        c.match_prefix(id, "", &tokens).unwrap();
        c.allocate(id, "", 8).unwrap();
    }
    assert_eq!(c.insert("a", &tokens).unwrap().reused_tokens, 0);
    let b_pages = c.describe("b").unwrap().pages.full;
    let inserted = c.insert("b", &tokens).unwrap();
    assert_eq!(inserted.reused_tokens, 8);
    assert_eq!(inserted.duplicates.full, b_pages, "b's own copies are freed");
    assert_eq!(c.describe("b").unwrap().pages.full, c.describe("a").unwrap().pages.full);
    assert_eq!(pool(&mut c, "full").free_tokens, 24);
    audit(&c);
}

#[test]
fn eviction_takes_the_least_recently_used_leaf_and_never_a_locked_one() {
    let mut c = cache(plan(1, 24, None, None), BackupMode::CpuTensor);
    serve(&mut c, "a", &seq(100, 8));
    serve(&mut c, "b", &seq(200, 8));
    // a is used again, so b is the least recent; c holds a lock on a.
    c.match_prefix("c", "", &seq(100, 8)).unwrap();
    assert_eq!(c.evict(Amounts { full: 1, ..Amounts::default() }).full, 8, "b's whole leaf");
    assert_eq!(c.match_prefix("d", "", &seq(200, 8)).unwrap().matched_tokens, 0);
    assert_eq!(c.evict(Amounts { full: 100, ..Amounts::default() }).full, 0, "a is locked by c");
    audit(&c);
}

#[test]
fn allocation_evicts_when_short_and_fails_cleanly_when_everything_is_locked() {
    let mut c = cache(plan(1, 16, None, None), BackupMode::CpuTensor);
    serve(&mut c, "a", &seq(1, 12));
    let grown = c.allocate("b", "", 10).unwrap();
    assert_eq!(grown.pages.full.len(), 10, "the cached prefix made room");
    let error = c.allocate("c", "", 10).unwrap_err();
    assert!(matches!(error, CacheError::OutOfMemory { component: "full", needed: 10, free: 6, .. }), "{error}");
    assert!(c.describe("c").is_err(), "a failed allocation creates no request");
    audit(&c);
}

#[test]
fn insert_refuses_tokens_that_are_not_the_request_s_own() {
    let mut c = cache(plan(1, 32, None, None), BackupMode::CpuTensor);
    serve(&mut c, "a", &seq(1, 8));
    c.match_prefix("b", "", &seq(1, 8)).unwrap();
    c.allocate("b", "", 4).unwrap();
    let mut other = seq(1, 12);
    other[2] = 999;
    assert!(matches!(c.insert("b", &other), Err(CacheError::InvalidTokens(_))));
    assert!(matches!(c.insert("b", &seq(1, 20)), Err(CacheError::InvalidTokens(_))), "more tokens than KV");
    assert!(matches!(c.match_prefix("b", "", &[1]), Err(CacheError::RequestExists(_))));
    assert!(matches!(c.release("nobody"), Err(CacheError::UnknownRequest(_))));
    audit(&c);
}

#[test]
fn namespaces_do_not_share_prefixes() {
    let mut c = cache(plan(1, 32, None, None), BackupMode::CpuTensor);
    let tokens = seq(1, 8);
    c.match_prefix("a", "lora-1", &tokens).unwrap();
    c.allocate("a", "", 8).unwrap();
    c.insert("a", &tokens).unwrap();
    c.release("a").unwrap();
    assert_eq!(c.match_prefix("b", "lora-2", &tokens).unwrap().matched_tokens, 0);
    assert_eq!(c.match_prefix("c", "lora-1", &tokens).unwrap().matched_tokens, 8);
    audit(&c);
}

#[test]
fn swa_matches_need_a_live_window_and_inserts_heal_tombstones() {
    // Window of 4 tokens.
    let mut c = cache(plan(1, 64, Some((64, 4)), None), BackupMode::CpuTensor);
    let tokens = seq(1, 12);
    serve(&mut c, "a", &tokens);
    let mut longer = tokens.clone();
    longer.extend(seq(50, 4));
    serve(&mut c, "b", &longer);
    let matched = c.match_prefix("c", "", &longer).unwrap();
    assert_eq!(matched.matched_tokens, 16);
    assert_eq!(matched.pages.swa_from_token, Some(12), "only the window's SWA pages are handed out");
    assert_eq!(matched.pages.swa.len(), 4);
    c.release("c").unwrap();
    // d locks the whole path for full KV but only the last window (the 4-token leaf) for SWA,
    // so evicting SWA tombstones the inner 12-token node and nothing else.
    c.match_prefix("d", "", &longer).unwrap();
    c.trim_swa("d").unwrap();
    let d_window = c.describe("d").unwrap();
    assert_eq!(d_window.pages.swa_from_token, Some(12));
    assert_eq!(c.evict(Amounts { swa: 100, ..Amounts::default() }).swa, 12, "the inner node's SWA only");
    audit(&c);
    // The inner node is now a tombstone: a match ending there has no live window.
    assert_eq!(c.match_prefix("e", "", &tokens).unwrap().matched_tokens, 0);
    c.release("e").unwrap();
    // A request that computed those tokens heals the tombstone with its own pages.
    c.allocate("f", "", 12).unwrap();
    c.insert("f", &tokens).unwrap();
    c.release("f").unwrap();
    assert_eq!(c.match_prefix("g", "", &tokens).unwrap().matched_tokens, 12);
    audit(&c);
}

#[test]
fn trimming_swa_frees_out_of_window_pages_and_then_the_window_lock() {
    let mut c = cache(plan(2, 64, Some((64, 4)), None), BackupMode::CpuTensor);
    let prompt = seq(1, 8);
    serve(&mut c, "a", &prompt);
    c.match_prefix("b", "", &prompt).unwrap();
    c.allocate("b", "", 4).unwrap();
    assert_eq!(c.trim_swa("b").unwrap(), 0, "len 12, window 4: positions 0..8 are cached, not b's");
    c.allocate("b", "", 8).unwrap();
    assert_eq!(c.trim_swa("b").unwrap(), 8, "len 20: b's own pages for 8..16 fall out");
    let swa = pool(&mut c, "swa");
    assert_eq!(swa.evictable_tokens, 8, "the cached window is unlocked once b moved past it");
    audit(&c);
}

#[test]
fn ssm_matches_end_only_at_nodes_with_state_and_copy_it_for_the_request() {
    let mut c = cache(plan(1, 64, None, Some(8)), BackupMode::CpuTensor);
    let tokens = seq(1, 10);
    c.match_prefix("a", "", &tokens).unwrap();
    c.allocate("a", "", 10).unwrap();
    let own = c.describe("a").unwrap().pages.ssm.unwrap();
    let state: Vec<u8> = (0..SSM_BYTES as u8).collect();
    c.write(Component::Ssm, &[own], &state).unwrap();
    c.insert("a", &tokens).unwrap();
    c.release("a").unwrap();
    // A longer prompt matches up to the node with state, not token by token.
    let mut longer = tokens.clone();
    longer.extend([77, 78]);
    let matched = c.match_prefix("b", "", &longer).unwrap();
    assert_eq!(matched.matched_tokens, 10);
    let slot = matched.pages.ssm.unwrap();
    assert_eq!(c.read(Component::Ssm, &[slot]).unwrap(), state, "copy-on-write of the cached state");
    // A prefix ending inside the node has no state to resume from.
    assert_eq!(c.match_prefix("c", "", &tokens[..6]).unwrap().matched_tokens, 0);
    audit(&c);
}

/// Writes a pattern into pages of a pool whose pages hold `page_size` tokens.
fn fill(c: &mut Cache, component: Component, pages: &[u32], seed: u8) -> Vec<u8> {
    let page_size = c.plan().page_size as u64;
    let unit = match component {
        Component::Full => FULL_BYTES * page_size,
        Component::Swa => SWA_BYTES * page_size,
        Component::Ssm => SSM_BYTES,
    } as usize;
    let data: Vec<u8> = (0..pages.len() * unit).map(|i| seed.wrapping_mul(31).wrapping_add(i as u8)).collect();
    c.write(component, pages, &data).unwrap();
    data
}

fn wait_done(c: &mut Cache, ticket: u64) {
    assert!(c.wait(ticket, WAIT), "ticket {ticket} did not finish");
    assert!(matches!(c.poll(&[ticket])[0], TicketStatus::Done { .. }));
}

#[test]
fn host_pool_retraction_round_trip_restores_identical_bytes() {
    let p = 2;
    let mut c = cache(with_host(plan(p, 32, Some((32, 4)), None), 16, 16), BackupMode::HostPool);
    let tokens = seq(1, 12);
    let shared = seq(1, 6);
    serve(&mut c, "warm", &shared);
    c.match_prefix("r", "", &tokens).unwrap();
    c.allocate("r", "", 6).unwrap();
    let before = c.describe("r").unwrap();
    assert_eq!(before.cached_tokens, 6);
    let full = fill(&mut c, Component::Full, &before.pages.full[3..], 1);
    let window_pages = &before.pages.swa[before.pages.swa.len() - 2..];
    let window = fill(&mut c, Component::Swa, window_pages, 2);
    let shared_full = c.read(Component::Full, &before.pages.full[..3]).unwrap();
    let free_before = pool(&mut c, "full").free_tokens;

    c.set_copies_running(false);
    let Retraction::BackingUp { ticket, bytes } = c.retract("r").unwrap() else { panic!("declined") };
    assert_eq!(bytes, 6 * p * FULL_BYTES as usize + 2 * p * SWA_BYTES as usize, "all full KV, the window's SWA");
    // While the copy is in flight its pages are pinned and stay the request's.
    let write = c.write(Component::Full, &before.pages.full[3..4], &[0; 16]);
    assert!(matches!(&write, Err(CacheError::InvalidPages(m)) if m.contains("copy in flight")), "{write:?}");
    assert_eq!(pool(&mut c, "full").free_tokens, free_before, "nothing is freed before the copy is done");
    assert!(matches!(c.poll(&[ticket])[0], TicketStatus::Pending { .. }));
    assert!(matches!(c.release("r"), Err(CacheError::BadState { .. })));
    c.set_copies_running(true);
    assert!(c.wait(ticket, WAIT));
    audit(&c);
    assert_eq!(pool(&mut c, "full").free_tokens, free_before + 6, "own pages freed once the copy is done");
    assert_eq!(c.stats().host.free_slots, 32 * p - (6 + 2) * p);
    // Reuse the freed device pages for something else before restoring.
    let other = c.allocate("other", "", 6).unwrap();
    fill(&mut c, Component::Full, &other.pages.full, 9);

    c.set_copies_running(false);
    let restored = c.restore("r").unwrap();
    let read = c.read(Component::Full, &restored.pages.full);
    assert!(matches!(&read, Err(CacheError::InvalidPages(m)) if m.contains("copy in flight")), "{read:?}");
    c.set_copies_running(true);
    wait_done(&mut c, restored.ticket);
    assert!(matches!(c.poll(&[ticket])[0], TicketStatus::Done { .. }));
    let after = c.describe("r").unwrap();
    assert_eq!(after.state, "active");
    assert_eq!(after.cached_tokens, 0, "a restored request owns all its pages");
    assert_eq!(c.read(Component::Full, &after.pages.full[..3]).unwrap(), shared_full);
    assert_eq!(c.read(Component::Full, &after.pages.full[3..]).unwrap(), full);
    let restored_window = &after.pages.swa[after.pages.swa.len() - 2..];
    assert_eq!(c.read(Component::Swa, restored_window).unwrap(), window);
    assert_eq!(c.stats().host.free_slots, 32 * p, "host slots come back after the restore");
    audit(&c);
}

#[test]
fn the_host_pool_evicts_old_backups_and_declines_what_cannot_fit() {
    let mut c = cache(with_host(plan(1, 32, None, None), 10, 0), BackupMode::HostPool);
    for id in ["old", "new"] {
        c.allocate(id, "", 6).unwrap();
    }
    let Retraction::BackingUp { ticket, .. } = c.retract("old").unwrap() else { panic!() };
    c.wait(ticket, WAIT);
    let Retraction::BackingUp { ticket, .. } = c.retract("new").unwrap() else { panic!() };
    c.wait(ticket, WAIT);
    assert_eq!(c.describe("old").unwrap().state, "lost (its backup was evicted)");
    assert!(matches!(c.restore("old"), Err(CacheError::BadState { .. })));
    c.allocate("huge", "", 11).unwrap();
    let Retraction::Declined { reason } = c.retract("huge").unwrap() else { panic!("fit") };
    assert!(reason.contains("host pool holds 10"), "{reason}");
    assert!(c.describe("huge").is_err(), "a declined retraction drops the request");
    c.release("old").unwrap();
    audit(&c);
}

#[test]
fn cpu_tensor_backups_carry_ssm_state_and_respect_the_host_memory_cap() {
    let mut plan = plan(1, 32, None, Some(4));
    plan.cpu_backup_limit = Some(200);
    let mut c = cache(plan, BackupMode::CpuTensor);
    let allocated = c.allocate("r", "", 8).unwrap();
    let full = fill(&mut c, Component::Full, &allocated.pages.full, 3);
    let state = fill(&mut c, Component::Ssm, &[allocated.pages.ssm.unwrap()], 4);
    let Retraction::BackingUp { ticket, bytes } = c.retract("r").unwrap() else { panic!() };
    assert_eq!(bytes, 8 * 8 + 16);
    c.wait(ticket, WAIT);
    assert_eq!(c.stats().cpu_backup_bytes, 80);
    c.allocate("s", "", 16).unwrap();
    assert!(matches!(c.retract("s").unwrap(), Retraction::Declined { .. }), "80 + 144 > 200");
    let restored = c.restore("r").unwrap();
    wait_done(&mut c, restored.ticket);
    assert_eq!(c.read(Component::Full, &restored.pages.full).unwrap(), full);
    assert_eq!(c.read(Component::Ssm, &[restored.pages.ssm.unwrap()]).unwrap(), state);
    assert_eq!(c.stats().cpu_backup_bytes, 0);
    audit(&c);
}

#[test]
fn reads_and_writes_refuse_pages_nobody_holds() {
    let mut c = cache(plan(1, 8, None, None), BackupMode::CpuTensor);
    assert!(matches!(c.read(Component::Full, &[3]), Err(CacheError::InvalidPages(_))));
    assert!(matches!(c.read(Component::Swa, &[0]), Err(CacheError::NoSuchPool("swa"))));
    let pages = c.allocate("a", "", 2).unwrap().pages.full;
    assert!(matches!(c.write(Component::Full, &pages, &[0; 3]), Err(CacheError::InvalidPages(_))));
    assert!(matches!(c.write(Component::Full, &[pages[0], pages[0]], &[0; 16]), Err(CacheError::InvalidPages(_))));
    assert!(matches!(c.read(Component::Full, &[99]), Err(CacheError::InvalidPages(_))));
}

#[test]
fn a_split_of_a_window_lock_s_top_node_keeps_lock_counts_exact() {
    let mut c = cache(plan(1, 64, Some((64, 6)), None), BackupMode::CpuTensor);
    let tokens = seq(1, 10);
    serve(&mut c, "a", &tokens);
    // b locks a window segment whose top is the 10-token node.
    c.match_prefix("b", "", &tokens).unwrap();
    // c splits that node at 3 and at 7 while b holds it.
    let mut branch = tokens[..3].to_vec();
    branch.push(500);
    serve(&mut c, "c", &branch);
    let mut branch = tokens[..7].to_vec();
    branch.push(600);
    serve(&mut c, "d", &branch);
    audit(&c);
    c.release("b").unwrap();
    audit(&c);
    assert_eq!(c.evict(Amounts { full: 1000, ..Amounts::default() }).full, 12);
    audit(&c);
}

#[test]
fn pure_swa_and_attention_free_layouts_cache_without_a_full_pool() {
    let mut c = cache(plan(1, 0, Some((32, 4)), None), BackupMode::CpuTensor);
    serve(&mut c, "a", &seq(1, 10));
    assert_eq!(c.match_prefix("b", "", &seq(1, 10)).unwrap().matched_tokens, 10);
    assert!(!c.stats().pools.contains_key("full"));
    audit(&c);
    let mut c = cache(plan(1, 0, None, Some(4)), BackupMode::CpuTensor);
    serve(&mut c, "a", &seq(1, 10));
    assert_eq!(c.match_prefix("b", "", &seq(1, 12)).unwrap().matched_tokens, 10);
    audit(&c);
}

#[test]
fn operations_on_requests_in_the_wrong_state_say_what_to_do() {
    let mut c = cache(with_host(plan(1, 16, None, None), 16, 0), BackupMode::HostPool);
    c.allocate("a", "", 4).unwrap();
    assert!(matches!(c.restore("a"), Err(CacheError::BadState { .. })));
    c.set_copies_running(false);
    let Retraction::BackingUp { ticket, .. } = c.retract("a").unwrap() else { panic!() };
    let error = c.release("a").unwrap_err();
    assert!(error.to_string().contains("backing up; poll its ticket"), "{error}");
    let error = c.restore("a").unwrap_err();
    assert!(error.to_string().contains("poll its backup ticket"), "{error}");
    c.set_copies_running(true);
    assert!(c.wait(ticket, WAIT));
    assert!(matches!(c.allocate("a", "", 1), Err(CacheError::BadState { .. })));
    assert!(matches!(c.retract("a"), Err(CacheError::BadState { .. })));
    c.release("a").unwrap();
    assert_eq!(c.stats().host.free_slots, 16, "releasing a retracted request drops its backup");
    audit(&c);
}

/// Random interleavings of every operation, with the full audit after each step and byte
/// equality of every restore.
mod properties {
    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::*;
    use crate::runtime::cache::Pages;

    #[derive(Debug, Clone)]
    enum Step {
        Match { request: usize, sequence: usize },
        Allocate { request: usize, tokens: usize },
        Write { request: usize, seed: u8 },
        Insert { request: usize },
        Release { request: usize },
        Evict { component: usize, units: usize },
        TrimSwa { request: usize },
        Retract { request: usize },
        Restore { request: usize },
        Poll,
        Wait,
    }

    fn step() -> impl Strategy<Value = Step> {
        let request = 0..6usize;
        prop_oneof![
            3 => (request.clone(), 0..SEQUENCES.len()).prop_map(|(request, sequence)| Step::Match { request, sequence }),
            3 => (request.clone(), 0..14usize).prop_map(|(request, tokens)| Step::Allocate { request, tokens }),
            2 => (request.clone(), any::<u8>()).prop_map(|(request, seed)| Step::Write { request, seed }),
            3 => request.clone().prop_map(|request| Step::Insert { request }),
            2 => request.clone().prop_map(|request| Step::Release { request }),
            1 => (0..3usize, 1..20usize).prop_map(|(component, units)| Step::Evict { component, units }),
            1 => request.clone().prop_map(|request| Step::TrimSwa { request }),
            2 => request.clone().prop_map(|request| Step::Retract { request }),
            2 => request.prop_map(|request| Step::Restore { request }),
            1 => Just(Step::Poll),
            1 => Just(Step::Wait),
        ]
    }

    /// Sequences that share prefixes in several ways; (1..8, 700..) diverges inside a page, so
    /// with pages of 2 or 3 tokens two siblings share their first token.
    const SEQUENCES: &[(u32, usize, u32, usize)] = &[
        (1, 20, 0, 0),
        (1, 12, 100, 8),
        (1, 6, 200, 14),
        (300, 16, 0, 0),
        (1, 20, 400, 4),
        (300, 6, 500, 10),
        (1, 7, 700, 9),
    ];

    fn sequence(index: usize) -> Vec<u32> {
        let (a, n, b, m) = SEQUENCES[index];
        (a..a + n as u32).chain(b..b + m as u32).collect()
    }

    /// The model's view of a request: its tokens (a sequence, then generated ones).
    struct Shadow {
        tokens: Vec<u32>,
        /// Bytes of everything backed up, taken just before the retraction.
        snapshot: Option<(Vec<u8>, Vec<u8>, Vec<u8>)>,
        tickets: Vec<u64>,
    }

    fn layout(kind: usize, page: usize, window: usize) -> PoolPlan {
        match kind {
            0 => plan(page, 40, None, None),
            1 => plan(page, 40, Some((32, window)), None),
            2 => plan(page, 0, Some((40, window)), None),
            3 => plan(page, 40, None, Some(5)),
            _ => plan(page, 0, None, Some(6)),
        }
    }

    fn no_internal_error<T>(result: Result<T, CacheError>) -> Result<Option<T>, TestCaseError> {
        match result {
            Ok(value) => Ok(Some(value)),
            Err(CacheError::Internal(e)) => Err(TestCaseError::fail(format!("internal error: {e}"))),
            Err(_) => Ok(None),
        }
    }

    /// Full pages, the in-window SWA pages and the SSM slot: what a backup copies.
    fn backed_up_pages(c: &Cache, info: &Pages, tokens: usize) -> (Vec<u32>, Vec<u32>, Option<u32>) {
        let p = c.plan().page_size;
        let window_start = tokens.saturating_sub(c.plan().window.unwrap_or(0)) / p;
        let from = info.swa_from_token.unwrap_or(0) / p;
        let skip = window_start.saturating_sub(from).min(info.swa.len());
        (info.full.clone(), info.swa[skip..].to_vec(), info.ssm)
    }

    fn read_all(c: &mut Cache, pages: &(Vec<u32>, Vec<u32>, Option<u32>), ssm: bool) -> (Vec<u8>, Vec<u8>, Vec<u8>) {
        let read = |c: &mut Cache, component, pages: &[u32]| {
            if pages.is_empty() { Vec::new() } else { c.read(component, pages).unwrap_or_default() }
        };
        let state: Vec<u32> = if ssm { pages.2.into_iter().collect() } else { Vec::new() };
        (read(c, Component::Full, &pages.0), read(c, Component::Swa, &pages.1), read(c, Component::Ssm, &state))
    }

    fn run(kind: usize, host: bool, page: usize, window: usize, steps: Vec<Step>) -> Result<(), TestCaseError> {
        let mut plan = layout(kind, page, window);
        if host {
            plan = with_host(plan, 24, 20);
        }
        let mode = if host { BackupMode::HostPool } else { BackupMode::CpuTensor };
        let backs_up_state = !host && kind >= 3;
        let mut c = Cache::new(plan, mode, false).map_err(TestCaseError::fail)?;
        let mut shadows: HashMap<usize, Shadow> = HashMap::new();
        for (i, step) in steps.into_iter().enumerate() {
            let id = |r: usize| format!("r{r}");
            match step {
                Step::Match { request, sequence: s } => {
                    if let Some(m) = no_internal_error(c.match_prefix(&id(request), "", &sequence(s)))? {
                        let tokens = sequence(s)[..m.matched_tokens].to_vec();
                        shadows.insert(request, Shadow { tokens, snapshot: None, tickets: Vec::new() });
                    }
                }
                Step::Allocate { request, tokens } => {
                    if no_internal_error(c.allocate(&id(request), "", tokens))?.is_some() {
                        let shadow = shadows.entry(request).or_insert_with(|| Shadow {
                            tokens: Vec::new(),
                            snapshot: None,
                            tickets: Vec::new(),
                        });
                        let start = shadow.tokens.len() as u32;
                        shadow
                            .tokens
                            .extend((start..start + tokens as u32).map(|t| 10_000 + request as u32 * 1000 + t));
                    }
                }
                Step::Write { request, seed } => {
                    if let Ok(info) = c.describe(&id(request)) {
                        let cached_pages = info.cached_tokens / page;
                        let own: Vec<u32> = info.pages.full.get(cached_pages..).unwrap_or_default().to_vec();
                        if !own.is_empty() && info.state == "active" {
                            fill(&mut c, Component::Full, &own, seed);
                        }
                        let swa_from = info.pages.swa_from_token.unwrap_or(0) / page;
                        let own_swa = info.pages.swa.get(cached_pages.saturating_sub(swa_from)..).unwrap_or_default();
                        if !own_swa.is_empty() && info.state == "active" {
                            fill(&mut c, Component::Swa, own_swa, seed);
                        }
                        if let (Some(slot), "active") = (info.pages.ssm, info.state) {
                            fill(&mut c, Component::Ssm, &[slot], seed);
                        }
                    }
                }
                Step::Insert { request } => {
                    if let Some(shadow) = shadows.get(&request) {
                        no_internal_error(c.insert(&id(request), &shadow.tokens))?;
                    }
                }
                Step::Release { request } => {
                    if no_internal_error(c.release(&id(request)))?.is_some() {
                        shadows.remove(&request);
                    }
                }
                Step::Evict { component, units } => {
                    let mut targets = Amounts::default();
                    match component {
                        0 => targets.full = units,
                        1 => targets.swa = units,
                        _ => targets.ssm = units,
                    }
                    c.evict(targets);
                }
                Step::TrimSwa { request } => {
                    no_internal_error(c.trim_swa(&id(request)))?;
                }
                Step::Retract { request } => {
                    let Ok(info) = c.describe(&id(request)) else { continue };
                    let snapshot = if info.state == "active" {
                        let pages = backed_up_pages(&c, &info.pages, info.tokens);
                        Some(read_all(&mut c, &pages, backs_up_state))
                    } else {
                        None
                    };
                    match no_internal_error(c.retract(&id(request)))? {
                        Some(Retraction::BackingUp { ticket, .. }) => {
                            let shadow = shadows.get_mut(&request).expect("tracked");
                            shadow.snapshot = snapshot;
                            shadow.tickets.push(ticket);
                        }
                        Some(Retraction::Declined { .. }) => {
                            shadows.remove(&request);
                        }
                        None => {}
                    }
                }
                Step::Restore { request } => {
                    if let Some(restored) = no_internal_error(c.restore(&id(request)))? {
                        prop_assert!(c.wait(restored.ticket, WAIT), "restore {} never finished", restored.ticket);
                        let shadow = shadows.get_mut(&request).expect("tracked");
                        let info = c.describe(&id(request)).unwrap();
                        let pages = backed_up_pages(&c, &info.pages, info.tokens);
                        let restored_bytes = read_all(&mut c, &pages, backs_up_state);
                        if let Some(snapshot) = shadow.snapshot.take() {
                            prop_assert_eq!(restored_bytes, snapshot, "step {}: restored bytes differ", i);
                        }
                    }
                }
                Step::Poll => {
                    let tickets: Vec<u64> = shadows.values().flat_map(|s| s.tickets.iter().copied()).collect();
                    c.poll(&tickets);
                }
                Step::Wait => {
                    for shadow in shadows.values() {
                        for ticket in &shadow.tickets {
                            c.wait(*ticket, WAIT);
                        }
                    }
                }
            }
            if let Err(e) = c.check_invariants() {
                return Err(TestCaseError::fail(format!("after step {i}: {e}")));
            }
            let stats = c.stats();
            for (name, pool) in &stats.pools {
                prop_assert_eq!(
                    pool.free_tokens + pool.evictable_tokens + pool.protected_tokens,
                    pool.total_tokens,
                    "{} pool",
                    name
                );
            }
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        #[test]
        fn random_operations_keep_every_invariant(
            kind in 0..5usize,
            host in any::<bool>(),
            page in 1..=3usize,
            window in 2..=8usize,
            steps in proptest::collection::vec(step(), 1..100),
        ) {
            // host_pool only exists for pools with full-attention KV and no SSM state.
            let host = host && kind <= 1;
            run(kind, host, page, window, steps)?;
        }
    }
}

#[test]
fn without_a_backup_a_retracted_request_is_dropped_and_its_pages_freed() {
    let mut c = cache(plan(1, 32, None, None), BackupMode::None);
    c.allocate("r", "", 6).unwrap();
    let Retraction::Declined { reason } = c.retract("r").unwrap() else { panic!("no backup to copy into") };
    assert!(reason.contains("without a KV backup. Retry later."), "{reason}");
    assert!(c.describe("r").is_err(), "the request is dropped, as SGLang aborts it with 503");
    c.allocate("next", "", 32).unwrap();
    audit(&c);
}
