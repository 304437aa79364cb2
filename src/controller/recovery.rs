//! Bounded recovery of broken replicas. A replica whose rank failed, was evicted or was deleted
//! is torn down and made again whole (SGLang cannot take a rank back into a running server).
//! A group that keeps failing (a bad node, a model that runs out of memory at start) must not be
//! recreated as fast as the controller runs: past [`THRESHOLD`] failures of a fleet within
//! [`WINDOW`], its replacements wait an exponential backoff from [`BASE`] up to [`CAP`], and the
//! resource is `Degraded`. The failures live in the fleet's status, so the backoff survives an
//! operator restart.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::api::RecoveryStatus;

/// How far back failures count.
pub const WINDOW: Duration = Duration::from_secs(600);
/// Failures within the window that are recovered from at once.
pub const THRESHOLD: usize = 3;
/// The first wait past the threshold; it doubles with every further failure.
pub const BASE: Duration = Duration::from_secs(10);
/// The longest wait.
pub const CAP: Duration = Duration::from_secs(300);
/// The failures a status keeps: enough to know the backoff has reached its cap.
const KEPT: usize = THRESHOLD + 8;

/// The wait before a fleet with `failures` recent failures makes a replica again.
pub fn backoff(failures: usize) -> Option<Duration> {
    let beyond = failures.checked_sub(THRESHOLD + 1)?;
    let doubled = BASE.saturating_mul(1u32.checked_shl(beyond.min(31) as u32).unwrap_or(u32::MAX));
    Some(doubled.min(CAP))
}

fn signed(duration: Duration) -> SignedDuration {
    SignedDuration::try_from(duration).unwrap_or(SignedDuration::MAX)
}

/// The fleet's recovery after this pass: the failures of `previous` still within the window,
/// `new` ones (each with what broke it) at `now`, and when replacements may be made again.
/// None when no failure is recent.
pub fn update(previous: Option<&RecoveryStatus>, new: &[String], now: Timestamp) -> Option<RecoveryStatus> {
    let since = now.checked_sub(signed(WINDOW)).unwrap_or(now);
    let mut failures: Vec<Time> =
        previous.map(|p| p.failures.iter().filter(|t| t.0 > since).cloned().collect()).unwrap_or_default();
    failures.extend(new.iter().map(|_| Time(now)));
    if failures.is_empty() {
        return None;
    }
    let excess = failures.len().saturating_sub(KEPT);
    failures.drain(..excess);
    let last = failures.last().map(|t| t.0).unwrap_or(now);
    let retry_after = backoff(failures.len()).and_then(|wait| last.checked_add(signed(wait)).ok()).map(Time);
    let last_reason = new.last().cloned().or_else(|| previous.map(|p| p.last_reason.clone())).unwrap_or_default();
    Some(RecoveryStatus { failures, last_reason, retry_after })
}

/// Whether the fleet has failed often enough recently that its replacements back off: the
/// resource is `Degraded` until those failures leave the window.
pub fn keeps_failing(recovery: &RecoveryStatus) -> bool {
    backoff(recovery.failures.len()).is_some()
}

/// How long replacements of a fleet still wait at `now`, if they do.
pub fn waiting(recovery: Option<&RecoveryStatus>, now: Timestamp) -> Option<Duration> {
    let until = recovery?.retry_after.as_ref()?.0;
    let left = until.duration_since(now);
    left.is_positive().then(|| Duration::try_from(left).unwrap_or(CAP))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + seconds).unwrap()
    }

    #[test]
    fn the_first_failures_are_recovered_from_at_once_then_the_wait_doubles_to_a_cap() {
        assert_eq!((backoff(1), backoff(THRESHOLD)), (None, None));
        assert_eq!(backoff(THRESHOLD + 1), Some(Duration::from_secs(10)));
        assert_eq!(backoff(THRESHOLD + 2), Some(Duration::from_secs(20)));
        assert_eq!(backoff(THRESHOLD + 4), Some(Duration::from_secs(80)));
        assert_eq!(backoff(THRESHOLD + 40), Some(CAP));
    }

    #[test]
    fn failures_age_out_of_the_window_and_the_reason_names_the_last() {
        let mut recovery = None;
        for second in 0..4 {
            recovery = update(recovery.as_ref(), &[format!("rank 1 failed at {second}")], at(second));
        }
        let held = recovery.clone().unwrap();
        assert_eq!(held.failures.len(), 4);
        assert_eq!(held.last_reason, "rank 1 failed at 3");
        assert_eq!(held.retry_after, Some(Time(at(13))), "10 s after the fourth");
        assert!(keeps_failing(&held));
        assert_eq!(waiting(Some(&held), at(5)), Some(Duration::from_secs(8)));
        assert_eq!(waiting(Some(&held), at(13)), None);
        let later = update(Some(&held), &[], at(3 + WINDOW.as_secs() as i64));
        assert_eq!(later, None, "nothing recent: recovered");
    }

    proptest! {
        /// However failures come, the wait never exceeds the cap, never holds a fleet with
        /// THRESHOLD recent failures or fewer, and the status stays small.
        #[test]
        fn waits_are_bounded(gaps in prop::collection::vec(0i64..400, 1..60)) {
            let mut recovery = None;
            let mut now = 0;
            for gap in gaps {
                now += gap;
                recovery = update(recovery.as_ref(), &["failed".into()], at(now));
                let current = recovery.as_ref().unwrap();
                prop_assert!(current.failures.len() <= KEPT);
                let wait = waiting(Some(current), at(now));
                prop_assert!(wait.is_none_or(|w| w <= CAP));
                let recent = current.failures.len();
                prop_assert_eq!(wait.is_some(), recent > THRESHOLD);
            }
        }
    }
}
