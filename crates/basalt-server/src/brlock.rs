//! A reader-writer lock for data that every command reads and almost
//! nothing writes: a database's [`crate::keyspace::Slot`], read-locked by
//! each command for its whole run and write-locked only by SWAPDB,
//! FLUSHDB, DEBUG RELOAD and a database's first open.
//!
//! The one idea: **readers on different threads touch different cache
//! lines.** A plain `RwLock` keeps its reader count in one word, so every
//! read lock and unlock is an atomic add on a cache line that all workers
//! share; under a pipeline of GETs on two workers that line moved between
//! the cores twice per command (`lock xadd` in `strings::get` was ~6 % of
//! the server's CPU on one hot key). Here the lock is [`LANES`] ordinary
//! reader-writer locks, each on its own cache line: a reader takes only
//! its thread's lane (connection worker `i` lane `i`, other threads the
//! upper half round-robin), a writer takes every lane in order. Reads
//! stay as cheap as an uncontended `RwLock`; a write costs `LANES` locks,
//! which the rare writes can afford. One difference in timing: a writer
//! waiting on lane `k` already holds lanes below `k`, so their readers wait
//! for the long commands running on each later lane in turn (a FLUSHDB
//! beside several KEYS on different workers), not only for the longest.
//!
//! It behaves as one `parking_lot::RwLock`: a reader excludes every
//! writer, a writer excludes everyone, a thread must not take a read it
//! already holds while a writer may be waiting (the same rule as
//! `parking_lot`'s `read`), and a write guard can be downgraded to a read
//! guard without letting a writer in between.

use std::cell::{Cell, UnsafeCell};
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::lock_api::{RawRwLock as _, RawRwLockDowngrade as _};
use parking_lot::RawRwLock;

/// Lanes per lock: more than the workers of a 16-core machine and the
/// threads beside them (HTTP, readers, maintenance), at 128 bytes each.
pub const LANES: usize = 32;

/// One lane on a cache line of its own (128 bytes: adjacent-line
/// prefetching pairs 64-byte lines on x86).
#[repr(align(128))]
struct Lane(RawRwLock);

static NEXT_LANE: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's lane, given on its first read.
    static LANE: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// This thread's lane: connection worker `i` reads on lane `i` (modulo
/// [`LANES`]), so up to `LANES / 2` workers never share one; every other
/// thread (HTTP, blocking pool, maintenance) gets one of the upper half,
/// round-robin.
fn my_lane() -> usize {
    LANE.with(|l| {
        if l.get() == usize::MAX {
            let worker = crate::workers::current();
            l.set(if worker != crate::workers::NOT_A_WORKER {
                usize::from(worker) % LANES
            } else {
                LANES / 2 + NEXT_LANE.fetch_add(1, Ordering::Relaxed) % (LANES / 2)
            });
        }
        l.get()
    })
}

/// The lock; see the module documentation.
pub struct BrLock<T> {
    lanes: Box<[Lane]>,
    data: UnsafeCell<T>,
}

// SAFETY: as for `parking_lot::RwLock`: the data is only reached through
// guards, shared (`&T`) under a read lane, exclusive under every lane.
unsafe impl<T: Send> Send for BrLock<T> {}
// SAFETY: see above.
unsafe impl<T: Send + Sync> Sync for BrLock<T> {}

impl<T: std::fmt::Debug> std::fmt::Debug for BrLock<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BrLock { .. }")
    }
}

impl<T> BrLock<T> {
    pub fn new(value: T) -> BrLock<T> {
        BrLock {
            lanes: (0..LANES).map(|_| Lane(RawRwLock::INIT)).collect(),
            data: UnsafeCell::new(value),
        }
    }

    /// Shared access: this thread's lane, read-locked.
    pub fn read(&self) -> ReadGuard<'_, T> {
        let lane = my_lane();
        self.lanes[lane].0.lock_shared();
        ReadGuard {
            lock: self,
            lane,
            _not_send: PhantomData,
        }
    }

    /// [`BrLock::read`] unless that would wait (a writer holds or awaits
    /// this thread's lane): then `None`.
    pub fn try_read(&self) -> Option<ReadGuard<'_, T>> {
        let lane = my_lane();
        // Only a lane this thread locked may get a guard: a guard built and
        // dropped after a failed try would unlock a lane it never held.
        if !self.lanes[lane].0.try_lock_shared() {
            return None;
        }
        Some(ReadGuard {
            lock: self,
            lane,
            _not_send: PhantomData,
        })
    }

    /// Exclusive access: every lane, write-locked in order (two writers
    /// cannot deadlock; a reader holds one lane and waits for none).
    pub fn write(&self) -> WriteGuard<'_, T> {
        for l in self.lanes.iter() {
            l.0.lock_exclusive();
        }
        WriteGuard {
            lock: self,
            _not_send: PhantomData,
        }
    }
}

/// Shared access to a [`BrLock`]'s data.
pub struct ReadGuard<'a, T> {
    lock: &'a BrLock<T>,
    lane: usize,
    /// Unlocked on the thread that locked it, as `parking_lot`'s guards.
    _not_send: PhantomData<*const ()>,
}

impl<'a, T> ReadGuard<'a, T> {
    /// A guard on a part of the data, holding the same lane. If `f`
    /// panics, `g` unlocks the lane as it unwinds.
    pub fn map<U: ?Sized>(g: ReadGuard<'a, T>, f: impl FnOnce(&T) -> &U) -> MappedReadGuard<'a, U> {
        let value: *const U = f(&g);
        let (lock, lane) = (g.lock, g.lane);
        std::mem::forget(g);
        MappedReadGuard {
            value,
            lane: &lock.lanes[lane].0,
            _data: PhantomData,
        }
    }
}

impl<T> Deref for ReadGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: a read lane is held: writers are kept out.
        unsafe { &*self.lock.data.get() }
    }
}

impl<T> Drop for ReadGuard<'_, T> {
    fn drop(&mut self) {
        // SAFETY: this guard read-locked this lane.
        unsafe { self.lock.lanes[self.lane].0.unlock_shared() }
    }
}

/// Shared access to part of a [`BrLock`]'s data ([`ReadGuard::map`]).
pub struct MappedReadGuard<'a, U: ?Sized> {
    /// A pointer, not a reference: the data may go once the lane is
    /// unlocked, which a reference held in a field must outlive.
    value: *const U,
    lane: &'a RawRwLock,
    /// Borrows the data for `'a`; the raw pointer also makes the guard
    /// neither `Send` nor `Sync`.
    _data: PhantomData<&'a U>,
}

impl<U: ?Sized> Deref for MappedReadGuard<'_, U> {
    type Target = U;
    fn deref(&self) -> &U {
        // SAFETY: the lane is read-locked while the guard lives.
        unsafe { &*self.value }
    }
}

impl<U: ?Sized> Drop for MappedReadGuard<'_, U> {
    fn drop(&mut self) {
        // SAFETY: the guard this one was mapped from read-locked the lane.
        unsafe { self.lane.unlock_shared() }
    }
}

/// Exclusive access to a [`BrLock`]'s data.
pub struct WriteGuard<'a, T> {
    lock: &'a BrLock<T>,
    _not_send: PhantomData<*const ()>,
}

impl<'a, T> WriteGuard<'a, T> {
    /// Turns exclusive access into shared access with no writer let in
    /// between: this thread's lane is downgraded, the others unlocked.
    pub fn downgrade(g: WriteGuard<'a, T>) -> ReadGuard<'a, T> {
        let lock = g.lock;
        std::mem::forget(g);
        let lane = my_lane();
        for (i, l) in lock.lanes.iter().enumerate() {
            // SAFETY: the write guard held every lane exclusively.
            unsafe {
                if i == lane {
                    l.0.downgrade();
                } else {
                    l.0.unlock_exclusive();
                }
            }
        }
        ReadGuard {
            lock,
            lane,
            _not_send: PhantomData,
        }
    }
}

impl<T> Deref for WriteGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: every lane is held exclusively.
        unsafe { &*self.lock.data.get() }
    }
}

impl<T> DerefMut for WriteGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: every lane is held exclusively.
        unsafe { &mut *self.lock.data.get() }
    }
}

impl<T> Drop for WriteGuard<'_, T> {
    fn drop(&mut self) {
        for l in self.lock.lanes.iter().rev() {
            // SAFETY: this guard write-locked every lane.
            unsafe { l.0.unlock_exclusive() }
        }
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for ReadGuard<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(f)
    }
}

impl<U: std::fmt::Debug + ?Sized> std::fmt::Debug for MappedReadGuard<'_, U> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(f)
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for WriteGuard<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn a_failed_try_read_leaves_a_waiting_writer_waiting_for_the_real_reader() {
        let lock = Arc::new(BrLock::new(0u64));
        let held = lock.read();
        let (tx, rx) = std::sync::mpsc::channel();
        let writer = {
            let lock = lock.clone();
            std::thread::spawn(move || {
                *lock.write() = 1;
                tx.send(()).unwrap();
            })
        };
        // The writer is waiting on this thread's lane (or will be): a try
        // read on it must fail rather than wait, and must not let the
        // writer in while `held` is still held.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            match lock.try_read() {
                Some(g) => drop(g),
                None => break,
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the writer never came"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        for _ in 0..5 {
            assert!(lock.try_read().is_none());
        }
        assert!(
            rx.recv_timeout(Duration::from_millis(200)).is_err(),
            "the writer got in while a reader held the lock"
        );
        assert_eq!(*held, 0);
        drop(held);
        rx.recv_timeout(Duration::from_secs(10))
            .expect("the writer gets in once the reader is gone");
        writer.join().unwrap();
        assert_eq!(*lock.read(), 1);
    }

    #[test]
    fn a_writer_waits_for_readers_on_every_thread_and_readers_see_whole_writes() {
        // Two fields written together under the write lock; readers on
        // many threads (more than the lanes, so some share one) must never
        // see them differ.
        let lock = Arc::new(BrLock::new((0u64, 0u64)));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let readers: Vec<_> = (0..LANES + 4)
            .map(|_| {
                let (lock, stop) = (lock.clone(), stop.clone());
                std::thread::spawn(move || {
                    let mut seen = 0;
                    while !stop.load(Ordering::Relaxed) {
                        {
                            let g = lock.read();
                            assert_eq!(g.0, g.1, "a torn write");
                            seen = seen.max(g.0);
                        }
                        std::thread::yield_now();
                    }
                    seen
                })
            })
            .collect();
        for i in 1..=100u64 {
            let mut g = lock.write();
            g.0 = i;
            std::thread::yield_now();
            g.1 = i;
        }
        stop.store(true, Ordering::Relaxed);
        for r in readers {
            assert!(r.join().unwrap() <= 100);
        }
        assert_eq!(*lock.read(), (100, 100));
    }

    #[test]
    fn a_panic_while_mapping_a_read_guard_unlocks_its_lane() {
        let lock = BrLock::new(1u32);
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _ = ReadGuard::map(lock.read(), |_: &u32| -> &u32 { panic!("mapping failed") });
        }));
        assert!(caught.is_err());
        *lock.write() = 2;
        assert_eq!(*lock.read(), 2, "a writer got in after the panic");
    }

    #[test]
    fn a_read_guard_keeps_writers_out_until_it_drops_and_a_downgrade_lets_none_in() {
        let lock = Arc::new(BrLock::new(1u32));
        let g = ReadGuard::map(lock.read(), |v| v);
        let l2 = lock.clone();
        let writer = std::thread::spawn(move || {
            *l2.write() = 2;
        });
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(*g, 1, "the writer waits for the mapped read guard");
        drop(g);
        writer.join().unwrap();
        assert_eq!(*lock.read(), 2);
        let mut w = lock.write();
        *w = 3;
        let r = WriteGuard::downgrade(w);
        let l3 = lock.clone();
        let writer = std::thread::spawn(move || {
            *l3.write() = 4;
        });
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(*r, 3, "no writer between the write and the downgraded read");
        drop(r);
        writer.join().unwrap();
        assert_eq!(*lock.read(), 4);
    }
}
