//! Byte arenas backing the pools ("device" memory is host memory on machines without a GPU)
//! and the copy engine that moves pages between them on its own thread.
//!
//! The arenas are shared with the copy thread, so access goes through raw pointers. Safety
//! rests on one rule the cache enforces: while a copy is in flight its source pages are only
//! read and its destination pages are touched by nobody else (the pages stay owned by the
//! retracting or restoring request, are pinned against the read/write API, and are neither
//! freed nor reallocated until the completion is drained).

use std::alloc::Layout;
use std::ptr::NonNull;
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Large allocations with this alignment come from `calloc`, so untouched pages cost nothing.
const ALIGN: usize = 16;

/// Memory that could not be had.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot allocate {bytes} bytes")]
pub(crate) struct AllocError {
    pub bytes: usize,
}

/// A zeroed, fixed-size byte buffer.
pub(crate) struct Arena {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the arena is plain memory; concurrent access follows the module's rule above.
unsafe impl Send for Arena {}
// SAFETY: as above.
unsafe impl Sync for Arena {}

impl Arena {
    pub(crate) fn zeroed(len: usize) -> Result<Self, AllocError> {
        if len == 0 {
            return Ok(Self { ptr: NonNull::dangling(), len });
        }
        let layout = Layout::from_size_align(len, ALIGN).map_err(|_| AllocError { bytes: len })?;
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        NonNull::new(ptr).map(|ptr| Self { ptr, len }).ok_or(AllocError { bytes: len })
    }

    /// Pointer to `len` bytes at `offset`, if they are inside the arena.
    fn range(&self, offset: usize, len: usize) -> Option<*mut u8> {
        let end = offset.checked_add(len)?;
        // SAFETY: the offset is within the allocation (or zero on an empty arena).
        (end <= self.len).then(|| unsafe { self.ptr.as_ptr().add(offset) })
    }

    /// Copies bytes out. The caller must ensure no copy is writing the range.
    pub(crate) fn read(&self, offset: usize, out: &mut [u8]) -> bool {
        let Some(src) = self.range(offset, out.len()) else { return false };
        // SAFETY: in bounds; `out` is a distinct buffer; no writer per the module rule.
        unsafe { std::ptr::copy_nonoverlapping(src, out.as_mut_ptr(), out.len()) };
        true
    }

    /// Copies bytes in. The caller must ensure no copy is touching the range.
    pub(crate) fn write(&self, offset: usize, data: &[u8]) -> bool {
        let Some(dst) = self.range(offset, data.len()) else { return false };
        // SAFETY: in bounds; `data` is a distinct buffer; no other accessor per the module rule.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dst, data.len()) };
        true
    }

    /// Copies within or between arenas on the calling thread (SSM copy-on-write).
    pub(crate) fn copy(src: &Arena, src_offset: usize, dst: &Arena, dst_offset: usize, len: usize) -> bool {
        let (Some(from), Some(to)) = (src.range(src_offset, len), dst.range(dst_offset, len)) else { return false };
        if std::ptr::eq(src, dst) && src_offset.abs_diff(dst_offset) < len {
            return false;
        }
        // SAFETY: both ranges are in bounds and do not overlap; no concurrent access per the rule.
        unsafe { std::ptr::copy_nonoverlapping(from, to, len) };
        true
    }

    /// Zeroes a range.
    pub(crate) fn zero(&self, offset: usize, len: usize) -> bool {
        let Some(dst) = self.range(offset, len) else { return false };
        // SAFETY: in bounds; no other accessor per the module rule.
        unsafe { std::ptr::write_bytes(dst, 0, len) };
        true
    }

    /// Touches every page so that benchmarks measure copies, not page faults.
    pub(crate) fn prefault(&self) {
        for offset in (0..self.len).step_by(4096) {
            self.write(offset, &[1]);
        }
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: allocated in `zeroed` with this very layout.
            unsafe {
                std::alloc::dealloc(self.ptr.as_ptr(), Layout::from_size_align_unchecked(self.len, ALIGN));
            }
        }
    }
}

/// One contiguous copy.
struct Segment {
    src: *const u8,
    dst: *mut u8,
    len: usize,
}

/// The copies of one ticket, with the arenas they touch kept alive until it is done.
pub(crate) struct CopyJob {
    ticket: u64,
    segments: Vec<Segment>,
    bytes: usize,
    arenas: Vec<Arc<Arena>>,
}

// SAFETY: the pointers target arenas the job keeps alive; access follows the module rule.
unsafe impl Send for CopyJob {}

impl CopyJob {
    pub(crate) fn new(ticket: u64) -> Self {
        Self { ticket, segments: Vec::new(), bytes: 0, arenas: Vec::new() }
    }

    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Adds copies of `unit` bytes from each source offset to the matching destination offset,
    /// merging runs that are contiguous on both sides. Returns false (adding nothing) if any
    /// range falls outside its arena.
    pub(crate) fn add(
        &mut self,
        src: &Arc<Arena>,
        src_offsets: &[usize],
        dst: &Arc<Arena>,
        dst_offsets: &[usize],
        unit: usize,
    ) -> bool {
        if unit == 0 || src_offsets.is_empty() {
            return true;
        }
        if src_offsets.len() != dst_offsets.len() {
            return false;
        }
        let mut added = Vec::new();
        let mut i = 0;
        while i < src_offsets.len() {
            let mut run = 1;
            while i + run < src_offsets.len()
                && src_offsets[i + run] == src_offsets[i] + run * unit
                && dst_offsets[i + run] == dst_offsets[i] + run * unit
            {
                run += 1;
            }
            let len = run * unit;
            let (Some(from), Some(to)) = (src.range(src_offsets[i], len), dst.range(dst_offsets[i], len)) else {
                return false;
            };
            added.push(Segment { src: from, dst: to, len });
            i += run;
        }
        self.bytes += added.iter().map(|s| s.len).sum::<usize>();
        self.segments.extend(added);
        for arena in [src, dst] {
            if !self.arenas.iter().any(|a| Arc::ptr_eq(a, arena)) {
                self.arenas.push(Arc::clone(arena));
            }
        }
        true
    }
}

/// A finished ticket.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Completed {
    pub ticket: u64,
    pub bytes: usize,
    /// Time spent copying (not waiting in the queue).
    pub copy_time: Duration,
}

/// Whether the copy thread may start its next job (tests hold copies in flight with it).
type Gate = Arc<(Mutex<bool>, Condvar)>;

/// A thread that carries out copy jobs in order and reports each when done.
pub(crate) struct CopyEngine {
    jobs: Option<mpsc::Sender<CopyJob>>,
    done: mpsc::Receiver<Completed>,
    worker: Option<JoinHandle<()>>,
    gate: Gate,
}

impl CopyEngine {
    pub(crate) fn start() -> std::io::Result<Self> {
        let (jobs, queue) = mpsc::channel::<CopyJob>();
        let (report, done) = mpsc::channel();
        let gate: Gate = Arc::new((Mutex::new(true), Condvar::new()));
        let worker_gate = Arc::clone(&gate);
        let worker = std::thread::Builder::new().name("kvpilot-copy".into()).spawn(move || {
            for job in queue {
                {
                    let (open, changed) = &*worker_gate;
                    let open = open.lock().unwrap_or_else(|p| p.into_inner());
                    drop(changed.wait_while(open, |open| !*open).unwrap_or_else(|p| p.into_inner()));
                }
                let started = Instant::now();
                for segment in &job.segments {
                    // SAFETY: ranges were bounds-checked when added, the arenas are alive (the
                    // job holds them), and the cache keeps other accessors away until done.
                    unsafe { std::ptr::copy_nonoverlapping(segment.src, segment.dst, segment.len) };
                }
                let completed = Completed { ticket: job.ticket, bytes: job.bytes, copy_time: started.elapsed() };
                drop(job.arenas);
                if report.send(completed).is_err() {
                    break;
                }
            }
        })?;
        Ok(Self { jobs: Some(jobs), done, worker: Some(worker), gate })
    }

    /// Lets the copy thread start jobs (true, the default) or holds them queued (false).
    pub(crate) fn set_open(&self, open: bool) {
        let (flag, changed) = &*self.gate;
        *flag.lock().unwrap_or_else(|p| p.into_inner()) = open;
        changed.notify_all();
    }

    /// Queues a job; false if the engine has stopped.
    pub(crate) fn submit(&self, job: CopyJob) -> bool {
        self.jobs.as_ref().is_some_and(|jobs| jobs.send(job).is_ok())
    }

    /// A finished job, if one is waiting.
    pub(crate) fn try_completed(&self) -> Option<Completed> {
        self.done.try_recv().ok()
    }

    /// Waits up to `timeout` for a finished job.
    pub(crate) fn wait_completed(&self, timeout: Duration) -> Option<Completed> {
        self.done.recv_timeout(timeout).ok()
    }
}

impl Drop for CopyEngine {
    fn drop(&mut self) {
        self.set_open(true);
        self.jobs.take();
        if let Some(worker) = self.worker.take() {
            let _ = worker.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_coalesce_and_arrive_intact() {
        let src = Arc::new(Arena::zeroed(64).unwrap());
        let dst = Arc::new(Arena::zeroed(64).unwrap());
        let data: Vec<u8> = (0..64).collect();
        assert!(src.write(0, &data));
        let mut job = CopyJob::new(7);
        // Pages 0,1,2 → 4,5,6 are one run; page 5 → 0 another.
        assert!(job.add(&src, &[0, 8, 16, 40], &dst, &[32, 40, 48, 0], 8));
        assert_eq!(job.segments.len(), 2);
        assert_eq!(job.bytes(), 32);
        let engine = CopyEngine::start().unwrap();
        assert!(engine.submit(job));
        let done = engine.wait_completed(Duration::from_secs(5)).unwrap();
        assert_eq!((done.ticket, done.bytes), (7, 32));
        let mut out = vec![0; 64];
        assert!(dst.read(0, &mut out));
        assert_eq!(&out[32..56], &data[0..24]);
        assert_eq!(&out[0..8], &data[40..48]);
    }

    #[test]
    fn out_of_bounds_ranges_are_refused() {
        let a = Arc::new(Arena::zeroed(16).unwrap());
        let mut job = CopyJob::new(1);
        assert!(!job.add(&a, &[8], &a, &[12], 8), "destination runs past the end");
        assert_eq!(job.bytes(), 0);
        assert!(!a.write(10, &[0; 8]));
        assert!(!Arena::copy(&a, 0, &a, 4, 8), "overlapping in-arena copy");
    }
}
