//! Counter groups through `perf_event_open` (Linux only): opening, reading and the fallback
//! from hardware to software counters. Must not decide what a missing counter means for a
//! report: it records which counters are there and why the others are not.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{FromRawFd, IntoRawFd, OwnedFd};

use perf_event::events::{Hardware, Software};
use perf_event::{Builder, Counter, Group, ReadFormat};

use super::*;

/// Events per group at most (8 hardware ones) plus the group's dummy leader.
const MAX_MEMBERS: usize = 9;
/// `nr`, `time_enabled`, `time_running`, then `(value, id)` per member.
const READ_WORDS: usize = 3 + 2 * MAX_MEMBERS;

/// The open counter groups of one thread: what a [`ThreadRecorder`](crate::ThreadRecorder)
/// reads at op boundaries, and what code outside the loader (the Python-side
/// instrumentation) opens to count its own ops. Reads count only the thread that opened it.
pub struct CounterSet {
    groups: Vec<OpenGroup>,
    mask: u16,
}

impl std::fmt::Debug for CounterSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CounterSet")
            .field("groups", &self.groups.len())
            .field("mask", &self.mask)
            .finish()
    }
}

struct OpenGroup {
    /// The group leader, read directly so reads do not allocate (perf-event2's
    /// `Group::read` returns a fresh `Vec` each time).
    leader: File,
    /// Kept open: closing a member removes it from the group.
    _members: Vec<Counter>,
    /// Counter kind of each position in the read buffer (position 0 is the dummy leader).
    slots: [Option<CounterKind>; MAX_MEMBERS],
    nr: usize,
    time_enabled: u64,
    time_running: u64,
}

impl OpenGroup {
    fn read_bytes(&mut self) -> io::Result<[u64; READ_WORDS]> {
        let mut bytes = [0u8; READ_WORDS * 8];
        let want = (3 + 2 * self.nr) * 8;
        let n = self.leader.read(&mut bytes[..want])?;
        if n != want {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "short perf group read",
            ));
        }
        let mut words = [0u64; READ_WORDS];
        for (w, b) in words.iter_mut().zip(bytes.chunks_exact(8)) {
            let mut a = [0u8; 8];
            a.copy_from_slice(b);
            *w = u64::from_ne_bytes(a);
        }
        Ok(words)
    }

    #[inline]
    fn read_into(&mut self, out: &mut CounterArray) -> io::Result<()> {
        let words = self.read_bytes()?;
        self.time_enabled = words[1];
        self.time_running = words[2];
        for (pos, slot) in self.slots.iter().enumerate().take(self.nr) {
            if let Some(kind) = slot {
                out[kind.index()] = words[3 + 2 * pos];
            }
        }
        Ok(())
    }
}

fn hardware_event(kind: CounterKind) -> Option<Hardware> {
    Some(match kind {
        CounterKind::Cycles => Hardware::CPU_CYCLES,
        CounterKind::Instructions => Hardware::INSTRUCTIONS,
        CounterKind::CacheReferences => Hardware::CACHE_REFERENCES,
        CounterKind::CacheMisses => Hardware::CACHE_MISSES,
        CounterKind::BranchInstructions => Hardware::BRANCH_INSTRUCTIONS,
        CounterKind::BranchMisses => Hardware::BRANCH_MISSES,
        CounterKind::StalledCyclesFrontend => Hardware::STALLED_CYCLES_FRONTEND,
        CounterKind::StalledCyclesBackend => Hardware::STALLED_CYCLES_BACKEND,
        _ => return None,
    })
}

fn software_event(kind: CounterKind) -> Option<Software> {
    Some(match kind {
        CounterKind::TaskClock => Software::TASK_CLOCK,
        CounterKind::PageFaults => Software::PAGE_FAULTS,
        CounterKind::ContextSwitches => Software::CONTEXT_SWITCHES,
        CounterKind::CpuMigrations => Software::CPU_MIGRATIONS,
        _ => return None,
    })
}

fn builder_for(kind: CounterKind) -> Option<Builder<'static>> {
    match kind.group() {
        CounterGroupKind::Hardware => hardware_event(kind).map(Builder::new),
        CounterGroupKind::Software => software_event(kind).map(Builder::new),
    }
}

/// Why a group did not open.
struct OpenFailure {
    message: String,
    /// Denied for lack of privilege: worth retrying with kernel activity excluded.
    denied: bool,
}

fn is_permission_error(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(1) | Some(13))
}

/// Opens one group on the calling thread with the events of `kinds` that the kernel accepts.
/// Returns the group, each event's status, and whether some event was denied for privilege.
fn open_group(
    kinds: &[CounterKind],
    exclude_kernel: bool,
    paranoid: Option<i32>,
) -> Result<(OpenGroup, Vec<EventAvailability>, bool), OpenFailure> {
    let fail = |e: io::Error| OpenFailure {
        message: explain(&e, paranoid),
        denied: is_permission_error(&e),
    };
    let mut leader_builder = Group::builder();
    leader_builder
        .read_format(
            ReadFormat::GROUP
                | ReadFormat::ID
                | ReadFormat::TOTAL_TIME_ENABLED
                | ReadFormat::TOTAL_TIME_RUNNING,
        )
        .exclude_kernel(exclude_kernel)
        .exclude_hv(true);
    let mut group = leader_builder.build_group().map_err(fail)?;

    let mut members = Vec::with_capacity(kinds.len());
    let mut events = Vec::with_capacity(kinds.len());
    let mut any_denied = false;
    for &kind in kinds {
        let Some(mut b) = builder_for(kind) else {
            continue;
        };
        b.exclude_kernel(exclude_kernel).exclude_hv(true);
        match group.add(&b) {
            Ok(c) => {
                members.push((kind, c));
                events.push(EventAvailability {
                    counter: kind,
                    available: true,
                    reason: None,
                });
            }
            Err(e) => {
                any_denied |= is_permission_error(&e);
                events.push(EventAvailability {
                    counter: kind,
                    available: false,
                    reason: Some(explain(&e, paranoid)),
                });
            }
        }
    }
    if members.is_empty() {
        // The per-event reasons say more than a generic message would.
        let first = events.iter().find_map(|e| e.reason.clone());
        return Err(OpenFailure {
            message: first.unwrap_or_else(|| "no event requested".into()),
            denied: any_denied,
        });
    }
    group.enable().map_err(fail)?;
    let leader_id = group.id();
    let ids: Vec<(CounterKind, u64)> = members.iter().map(|(k, c)| (*k, c.id())).collect();
    let raw = group.into_counter().into_raw_fd();
    // SAFETY: `raw` comes from `into_raw_fd`, which hands over ownership of an open
    // descriptor that nothing else closes; wrapping it in `OwnedFd` makes us its sole owner.
    let leader = File::from(unsafe { OwnedFd::from_raw_fd(raw) });
    let mut open = OpenGroup {
        leader,
        _members: members.into_iter().map(|(_, c)| c).collect(),
        slots: [None; MAX_MEMBERS],
        nr: 1 + ids.len(),
        time_enabled: 0,
        time_running: 0,
    };
    // Map read positions to kinds by id once, so the hot path indexes by position.
    let words = open.read_bytes().map_err(fail)?;
    if words[0] != open.nr as u64 {
        return Err(OpenFailure {
            message: format!(
                "group read returned {} events, expected {}",
                words[0], open.nr
            ),
            denied: false,
        });
    }
    for pos in 0..open.nr {
        let id = words[3 + 2 * pos + 1];
        if id != leader_id {
            open.slots[pos] = ids.iter().find(|(_, i)| *i == id).map(|(k, _)| *k);
        }
    }
    Ok((open, events, any_denied))
}

/// Result of one attempt at opening a group: the group, each event's status, and whether an
/// event was denied for privilege.
type Opened = Result<(OpenGroup, Vec<EventAvailability>, bool), OpenFailure>;

/// Opens a group, retrying with kernel activity excluded when counting it is denied.
fn open_with_fallback(
    kinds: &[CounterKind],
    paranoid: Option<i32>,
) -> (Option<OpenGroup>, GroupAvailability) {
    open_with_fallback_using(kinds, &mut |k, exclude_kernel| {
        open_group(k, exclude_kernel, paranoid)
    })
}

/// [`open_with_fallback`] with the opening attempt passed in (tests inject failures).
fn open_with_fallback_using(
    kinds: &[CounterKind],
    open: &mut dyn FnMut(&[CounterKind], bool) -> Opened,
) -> (Option<OpenGroup>, GroupAvailability) {
    let mut first_try: Option<(OpenGroup, Vec<EventAvailability>)> = None;
    let mut failure = String::new();
    for exclude_kernel in [false, true] {
        match open(kinds, exclude_kernel) {
            Ok((group, events, any_denied)) => {
                if !exclude_kernel && any_denied {
                    // Some events may open with kernel activity excluded; keep this result
                    // in case the retry does no better.
                    first_try = Some((group, events));
                    continue;
                }
                let improved = match &first_try {
                    Some((_, ev)) => count_available(&events) > count_available(ev),
                    None => true,
                };
                if improved {
                    return group_result(group, events, exclude_kernel);
                }
                break;
            }
            Err(f) => {
                failure = f.message;
                if !f.denied {
                    break;
                }
            }
        }
    }
    if let Some((group, events)) = first_try {
        return group_result(group, events, false);
    }
    (
        None,
        GroupAvailability {
            available: false,
            reason: Some(failure.clone()),
            exclude_kernel: false,
            events: kinds
                .iter()
                .map(|&counter| EventAvailability {
                    counter,
                    available: false,
                    reason: Some(failure.clone()),
                })
                .collect(),
        },
    )
}

fn count_available(events: &[EventAvailability]) -> usize {
    events.iter().filter(|e| e.available).count()
}

fn group_result(
    group: OpenGroup,
    events: Vec<EventAvailability>,
    exclude_kernel: bool,
) -> (Option<OpenGroup>, GroupAvailability) {
    let missing: Vec<String> = events
        .iter()
        .filter(|e| !e.available)
        .map(|e| {
            format!(
                "{}: {}",
                e.counter.name(),
                e.reason.as_deref().unwrap_or("unavailable")
            )
        })
        .collect();
    let reason = (!missing.is_empty()).then(|| missing.join("; "));
    (
        Some(group),
        GroupAvailability {
            available: true,
            reason,
            exclude_kernel,
            events,
        },
    )
}

/// Spins long enough for a scheduled counter to accumulate running time.
fn burn_a_little() {
    let t0 = crate::clock::now_ns();
    let mut x = 0u64;
    while crate::clock::now_ns() - t0 < 20_000 {
        x = std::hint::black_box(x.wrapping_add(1));
    }
}

const HARDWARE: [CounterKind; 8] = [
    CounterKind::Cycles,
    CounterKind::Instructions,
    CounterKind::BranchInstructions,
    CounterKind::BranchMisses,
    CounterKind::CacheReferences,
    CounterKind::CacheMisses,
    CounterKind::StalledCyclesFrontend,
    CounterKind::StalledCyclesBackend,
];
const SOFTWARE: [CounterKind; 4] = [
    CounterKind::TaskClock,
    CounterKind::PageFaults,
    CounterKind::ContextSwitches,
    CounterKind::CpuMigrations,
];

/// Opens the hardware group, dropping trailing events while the PMU cannot schedule them all
/// at once (a group that does not fit never counts).
fn open_hardware(paranoid: Option<i32>) -> (Option<OpenGroup>, GroupAvailability) {
    let mut kinds: Vec<CounterKind> = HARDWARE.to_vec();
    let mut dropped: Vec<CounterKind> = Vec::new();
    loop {
        let (group, mut avail) = open_with_fallback(&kinds, paranoid);
        let Some(mut group) = group else {
            return (None, avail);
        };
        burn_a_little();
        let mut scratch = [0u64; NUM_COUNTERS];
        let scheduled = group.read_into(&mut scratch).is_ok() && group.time_running > 0;
        let opened: Vec<CounterKind> = avail
            .events
            .iter()
            .filter(|e| e.available)
            .map(|e| e.counter)
            .collect();
        if scheduled || opened.len() <= 1 {
            if !scheduled {
                let why = "the PMU never scheduled the group (time_running = 0)";
                avail.available = false;
                avail.reason = Some(why.into());
                for e in avail.events.iter_mut().filter(|e| e.available) {
                    e.available = false;
                    e.reason = Some(why.into());
                }
                for &counter in &dropped {
                    avail.events.push(EventAvailability {
                        counter,
                        available: false,
                        reason: Some(why.into()),
                    });
                }
                return (None, avail);
            }
            for &k in &dropped {
                avail.events.push(EventAvailability {
                    counter: k,
                    available: false,
                    reason: Some("dropped: the PMU cannot count the whole group at once".into()),
                });
            }
            return (Some(group), avail);
        }
        // Drop the last opened event and try again with a smaller group.
        if let Some(&last) = opened.last() {
            kinds.retain(|&k| k != last);
            dropped.insert(0, last);
        }
    }
}

impl CounterSet {
    /// Opens the requested groups on the calling thread. Never fails: what could not be
    /// opened is described in the returned availability.
    pub fn open(config: CounterConfig) -> (Option<CounterSet>, CounterAvailability) {
        let paranoid = read_paranoid();
        let mut groups = Vec::with_capacity(2);
        let hardware = if config.hardware {
            let (g, a) = open_hardware(paranoid);
            groups.extend(g);
            a
        } else {
            disabled(CounterGroupKind::Hardware)
        };
        let software = if config.software {
            let (g, a) = open_with_fallback(&SOFTWARE, paranoid);
            groups.extend(g);
            a
        } else {
            disabled(CounterGroupKind::Software)
        };
        let avail = CounterAvailability {
            hardware,
            software,
            perf_event_paranoid: paranoid,
        };
        if groups.is_empty() {
            return (None, avail);
        }
        let mask = avail.mask();
        (Some(CounterSet { groups, mask }), avail)
    }

    /// Bit mask of the counters this set reads.
    pub fn mask(&self) -> u16 {
        self.mask
    }

    /// Reads every group into `out` (one `read(2)` per group). False if a read failed; the
    /// values of that group are left as they were.
    #[inline]
    pub fn read(&mut self, out: &mut CounterArray) -> bool {
        let mut ok = true;
        for g in &mut self.groups {
            ok &= g.read_into(out).is_ok();
        }
        ok
    }

    /// Lowest `time_running / time_enabled` over the groups at the last read: below 1 means
    /// the kernel multiplexed a group and its counts cover only part of the time.
    pub fn running_fraction(&self) -> f64 {
        self.groups
            .iter()
            .filter(|g| g.time_enabled > 0)
            .map(|g| g.time_running as f64 / g.time_enabled as f64)
            .fold(1.0, f64::min)
    }
}

fn disabled(g: CounterGroupKind) -> GroupAvailability {
    GroupAvailability {
        available: false,
        reason: Some("disabled by configuration".into()),
        exclude_kernel: false,
        events: CounterKind::ALL
            .iter()
            .filter(|k| k.group() == g)
            .map(|&counter| EventAvailability {
                counter,
                available: false,
                reason: Some("disabled by configuration".into()),
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn software_group_opens_or_explains() {
        let (set, avail) = CounterSet::open(CounterConfig {
            hardware: false,
            software: true,
        });
        assert!(!avail.hardware.available);
        assert_eq!(
            avail.hardware.reason.as_deref(),
            Some("disabled by configuration")
        );
        match set {
            Some(mut set) => {
                assert!(avail.software.available);
                assert!(avail.has(CounterKind::TaskClock));
                let mut a = [0u64; NUM_COUNTERS];
                assert!(set.read(&mut a));
                burn_a_little();
                let mut b = [0u64; NUM_COUNTERS];
                assert!(set.read(&mut b));
                let tc = CounterKind::TaskClock.index();
                assert!(b[tc] > a[tc], "task clock did not advance: {a:?} {b:?}");
                assert!(set.running_fraction() > 0.0);
            }
            None => {
                eprintln!("software counters unavailable here: {avail:?}");
                assert!(!avail.software.available);
                assert!(avail.software.reason.is_some());
            }
        }
    }

    #[test]
    fn an_event_the_kernel_rejects_is_reported_not_fatal() {
        // A raw hardware event with an absurd config: rejected (EINVAL/ENOENT/EOPNOTSUPP)
        // on every machine, PMU or not. The group still opens with the software event.
        let paranoid = read_paranoid();
        let mut leader = Group::builder();
        leader.read_format(ReadFormat::GROUP | ReadFormat::ID);
        let group = leader.build_group();
        let Ok(mut group) = group else {
            eprintln!("perf_event_open denied entirely; nothing to check here");
            return;
        };
        let mut bogus = Builder::new(perf_event::events::Raw::new(u64::MAX));
        bogus.exclude_kernel(true);
        let err = group.add(&bogus).err();
        let err = err.expect("an all-ones raw event must be rejected");
        let msg = explain(&err, paranoid);
        assert!(msg.contains("os error"), "{msg}");
    }

    fn denied() -> OpenFailure {
        OpenFailure {
            message: explain(&io::Error::from_raw_os_error(13), Some(2)),
            denied: true,
        }
    }

    #[test]
    fn denied_groups_are_retried_without_kernel_then_reported() {
        let mut calls = Vec::new();
        let (group, avail) = open_with_fallback_using(&SOFTWARE, &mut |_, ex| {
            calls.push(ex);
            Err(denied())
        });
        assert!(group.is_none());
        assert_eq!(calls, [false, true]);
        assert!(!avail.available);
        let reason = avail.reason.as_deref().unwrap_or_default();
        assert!(reason.starts_with("permission denied"), "{reason}");
        assert!(reason.contains("os error 13"));
        assert_eq!(avail.events.len(), SOFTWARE.len());
        assert!(avail
            .events
            .iter()
            .all(|e| !e.available && e.reason.is_some()));
    }

    #[test]
    fn other_failures_are_not_retried() {
        let mut calls = 0;
        let (group, avail) = open_with_fallback_using(&HARDWARE, &mut |_, _| {
            calls += 1;
            Err(OpenFailure {
                message: explain(&io::Error::from_raw_os_error(2), None),
                denied: false,
            })
        });
        assert!(group.is_none());
        assert_eq!(calls, 1);
        assert!(avail
            .reason
            .as_deref()
            .is_some_and(|r| r.contains("no hardware PMU")));
    }

    #[test]
    fn a_group_denied_with_kernel_opens_without_it() {
        let paranoid = read_paranoid();
        let (group, avail) = open_with_fallback_using(&SOFTWARE, &mut |k, ex| {
            if ex {
                open_group(k, ex, paranoid)
            } else {
                Err(denied())
            }
        });
        match group {
            Some(mut g) => {
                assert!(avail.available && avail.exclude_kernel);
                let mut a = [0u64; NUM_COUNTERS];
                assert!(g.read_into(&mut a).is_ok());
            }
            None => {
                eprintln!("perf_event_open denied entirely here: {:?}", avail.reason);
                assert!(avail.reason.is_some());
            }
        }
    }

    #[test]
    fn explain_names_the_cause() {
        let e = io::Error::from_raw_os_error(13);
        let m = explain(&e, Some(4));
        assert!(m.starts_with("permission denied"), "{m}");
        assert!(m.contains("perf_event_paranoid=4"));
        let e = io::Error::from_raw_os_error(2);
        assert!(explain(&e, None).contains("no hardware PMU"));
    }

    #[test]
    fn event_kinds_map_to_their_group() {
        for k in CounterKind::ALL {
            match k.group() {
                CounterGroupKind::Hardware => assert!(hardware_event(k).is_some()),
                CounterGroupKind::Software => assert!(software_event(k).is_some()),
            }
        }
    }
}
