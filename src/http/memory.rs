//! Memory return: after a large body, the pages it held go back to the
//! system at once instead of waiting for the thread to allocate again.

/// Bodies from this size on are followed by handing freed memory back.
pub(super) const LARGE_BODY: usize = 1 << 20;

/// Hands the memory a large call freed back to the system at once. mimalloc
/// purges freed pages only when the thread that owns them allocates again,
/// and a blocking-pool thread may sit idle for a long time after a burst.
pub(super) fn release_memory() {
    #[cfg(feature = "mimalloc")]
    #[allow(unsafe_code)]
    // SAFETY: mi_collect only walks this thread's own heap.
    unsafe {
        libmimalloc_sys::mi_collect(true);
    }
}
