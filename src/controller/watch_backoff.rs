//! The pause of the controller's watches after a watch error.
//!
//! kube-runtime pauses all of a controller's watches together after an error of any of them,
//! by default 800 ms doubling to 30 s. After a kube-apiserver restart each watch resumes with a
//! 410 Expired (the new watch cache starts at the restart's etcd revision) and relists, one
//! after the other; with the default each 410 lengthens the pause of all five watches, and the
//! controller missed changes for minutes (seen against a real kube-apiserver). The 410s come
//! one per wake-up, before any event that would reset the pause, so the cap is what counts:
//! client-go relists on a 410 at once; here the pause starts at 100 ms and is capped at 1 s,
//! so a restart costs about a second per watch. While the API server stays unreachable that is
//! one connection attempt a second, which one operator's five watches can afford.

use std::time::Duration;

use kube::runtime::utils::Backoff;

/// The first pause.
pub const FIRST: Duration = Duration::from_millis(100);
/// The longest pause, while the API server stays unreachable.
pub const LONGEST: Duration = Duration::from_secs(1);

/// Doubles from [`FIRST`] up to [`LONGEST`], and never gives up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatchBackoff {
    next: Duration,
}

impl Default for WatchBackoff {
    fn default() -> Self {
        WatchBackoff { next: FIRST }
    }
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let pause = self.next;
        self.next = (pause * 2).min(LONGEST);
        Some(pause)
    }
}

impl Backoff for WatchBackoff {
    fn reset(&mut self) {
        *self = WatchBackoff::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_to_a_cap_and_never_gives_up() {
        let pauses: Vec<u64> = WatchBackoff::default().take(8).map(|d| d.as_millis() as u64).collect();
        assert_eq!(pauses, [100, 200, 400, 800, 1000, 1000, 1000, 1000]);
    }

    #[test]
    fn five_watches_resuming_with_410_after_an_outage_pause_five_seconds_in_all() {
        let mut after_outage = WatchBackoff::default();
        after_outage.by_ref().take(10).for_each(drop);
        let total: Duration = after_outage.take(5).sum();
        assert_eq!(total, Duration::from_secs(5));
    }

    #[test]
    fn reset_starts_over() {
        let mut backoff = WatchBackoff::default();
        backoff.by_ref().take(4).for_each(drop);
        backoff.reset();
        assert_eq!(backoff.next(), Some(FIRST));
    }
}
