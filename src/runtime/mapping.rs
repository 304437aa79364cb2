//! A rank's host KV pool, mapped from the memfd SGLang's shm allocator created
//! (`"allocator": "shm"`): the sidecar reads and writes the pool in place.

use std::os::fd::OwnedFd;
use std::ptr::NonNull;

use rustix::mm::{MapFlags, ProtFlags};
use thiserror::Error;

/// Why a pool could not be mapped or a region is refused.
#[derive(Debug, Error)]
pub enum MappingError {
    #[error("the pool fd is not a regular file or memfd (mode {mode:#o}); send the host pool's memfd")]
    NotAFile { mode: u32 },
    #[error("HELLO declares {declared} pool bytes but the fd holds {actual}; send the host pool's own memfd and size")]
    TooSmall { declared: u64, actual: u64 },
    #[error("cannot inspect the pool fd: {0}")]
    Stat(rustix::io::Errno),
    #[error("cannot map {len} pool bytes: {source}")]
    Map { len: u64, source: rustix::io::Errno },
    #[error("region [{offset}, +{len}) lies outside the {size}-byte pool mapping")]
    OutOfBounds { offset: u64, len: u64, size: u64 },
}

/// A shared, read-write mapping of a host pool.
pub struct PoolMapping {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain shared memory owned by this value; concurrent access to the same
// slots is SGLang's to order (it never reads a slot while a transfer for it is in flight).
unsafe impl Send for PoolMapping {}
// SAFETY: as above; `PoolMapping` itself holds no interior state besides the mapping.
unsafe impl Sync for PoolMapping {}

impl PoolMapping {
    /// Maps the first `len` bytes of `fd`, after checking it is a file at least that long: a
    /// shorter one would fault (SIGBUS) on access past its end.
    pub fn new(fd: &OwnedFd, len: u64) -> Result<Self, MappingError> {
        let stat = rustix::fs::fstat(fd).map_err(MappingError::Stat)?;
        let file_type = stat.st_mode & 0o170_000;
        if file_type != 0o100_000 {
            return Err(MappingError::NotAFile { mode: stat.st_mode });
        }
        let actual = u64::try_from(stat.st_size).unwrap_or(0);
        if actual < len {
            return Err(MappingError::TooSmall { declared: len, actual });
        }
        let size = usize::try_from(len).map_err(|_| MappingError::TooSmall { declared: len, actual })?;
        // SAFETY: a fresh mapping at an address the kernel picks; nothing else refers to it.
        let base = unsafe {
            rustix::mm::mmap(std::ptr::null_mut(), size, ProtFlags::READ | ProtFlags::WRITE, MapFlags::SHARED, fd, 0)
        }
        .map_err(|source| MappingError::Map { len, source })?;
        let base =
            NonNull::new(base.cast::<u8>()).ok_or(MappingError::Map { len, source: rustix::io::Errno::INVAL })?;
        Ok(Self { base, len: size })
    }

    /// Bytes mapped.
    pub fn len(&self) -> u64 {
        self.len as u64
    }

    /// Whether the mapping is empty (never: HELLO refuses 0-byte pools with an fd).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Checks that `[offset, offset + len)` lies inside the mapping.
    pub fn check(&self, offset: u64, len: u64) -> Result<(), MappingError> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len as u64 => Ok(()),
            _ => Err(MappingError::OutOfBounds { offset, len, size: self.len as u64 }),
        }
    }

    /// Appends the region's bytes to `out`, without zero-filling `out` first.
    pub fn read_into(&self, offset: u64, len: u64, out: &mut Vec<u8>) -> Result<(), MappingError> {
        self.check(offset, len)?;
        let len = len as usize;
        out.reserve(len);
        // SAFETY: the region is inside the mapping (checked); `out` has `len` spare bytes
        // (reserved), which the copy initialises before `set_len` exposes them.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.base.as_ptr().add(offset as usize),
                out.as_mut_ptr().add(out.len()),
                len,
            );
            out.set_len(out.len() + len);
        }
        Ok(())
    }

    /// Writes `bytes` into the region starting at `offset`.
    pub fn write(&self, offset: u64, bytes: &[u8]) -> Result<(), MappingError> {
        self.check(offset, bytes.len() as u64)?;
        // SAFETY: the region is inside the mapping (checked); the source is the store's own
        // buffer, never the mapping, so the ranges cannot overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.base.as_ptr().add(offset as usize), bytes.len());
        }
        Ok(())
    }
}

impl Drop for PoolMapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping `new` created; no reference to it outlives `self`.
        let _ = unsafe { rustix::mm::munmap(self.base.as_ptr().cast(), self.len) };
    }
}
