//! CPU counter groups per worker thread, read at op boundaries (`perf_event_open`).
//!
//! Two groups, each counting the calling thread only: a hardware group (cycles, instructions,
//! cache and branch events, front/back-end stalls where the CPU exposes them) and a software group
//! (task-clock, page faults, context switches, CPU migrations). A group is read with one `read(2)`
//! into a fixed buffer, so the boundary costs one system call per group and no allocation.
//!
//! Many machines expose no hardware PMU, and `perf_event_paranoid` or a seccomp filter may deny
//! `perf_event_open` altogether: every group and event is probed separately, the reason it is
//! missing (the OS error, with a hint) is recorded in the profile, and whatever works is kept.
//! This module must never fail or panic because counters are missing.

use serde::{Deserialize, Serialize};

/// Number of distinct counters ([`CounterKind::ALL`]).
pub const NUM_COUNTERS: usize = 12;

/// Raw counter values or deltas of one thread, indexed by [`CounterKind::index`].
pub type CounterArray = [u64; NUM_COUNTERS];

/// One counter the profiler can read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CounterKind {
    /// CPU cycles (hardware).
    Cycles,
    /// Retired instructions (hardware).
    Instructions,
    /// Last-level cache references (hardware).
    CacheReferences,
    /// Last-level cache misses (hardware).
    CacheMisses,
    /// Retired branch instructions (hardware).
    BranchInstructions,
    /// Mispredicted branches (hardware).
    BranchMisses,
    /// Cycles stalled in the front end (hardware; rarely exposed on Intel).
    StalledCyclesFrontend,
    /// Cycles stalled in the back end (hardware; rarely exposed on Intel).
    StalledCyclesBackend,
    /// Nanoseconds the thread ran on a CPU (software).
    TaskClock,
    /// Page faults, minor and major (software).
    PageFaults,
    /// Context switches of the thread (software).
    ContextSwitches,
    /// Moves of the thread to another CPU (software).
    CpuMigrations,
}

/// Which of the two counter groups a counter belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CounterGroupKind {
    /// Counted by the CPU's performance monitoring unit.
    Hardware,
    /// Counted by the kernel.
    Software,
}

impl CounterKind {
    /// Every counter, in index order.
    pub const ALL: [CounterKind; NUM_COUNTERS] = [
        CounterKind::Cycles,
        CounterKind::Instructions,
        CounterKind::CacheReferences,
        CounterKind::CacheMisses,
        CounterKind::BranchInstructions,
        CounterKind::BranchMisses,
        CounterKind::StalledCyclesFrontend,
        CounterKind::StalledCyclesBackend,
        CounterKind::TaskClock,
        CounterKind::PageFaults,
        CounterKind::ContextSwitches,
        CounterKind::CpuMigrations,
    ];

    /// Position in a [`CounterArray`].
    #[inline]
    pub const fn index(self) -> usize {
        self as usize
    }

    /// The name used in profiles, summaries and traces (`"cycles"`, `"task_clock"`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            CounterKind::Cycles => "cycles",
            CounterKind::Instructions => "instructions",
            CounterKind::CacheReferences => "cache_references",
            CounterKind::CacheMisses => "cache_misses",
            CounterKind::BranchInstructions => "branch_instructions",
            CounterKind::BranchMisses => "branch_misses",
            CounterKind::StalledCyclesFrontend => "stalled_cycles_frontend",
            CounterKind::StalledCyclesBackend => "stalled_cycles_backend",
            CounterKind::TaskClock => "task_clock",
            CounterKind::PageFaults => "page_faults",
            CounterKind::ContextSwitches => "context_switches",
            CounterKind::CpuMigrations => "cpu_migrations",
        }
    }

    /// The group the counter is read with.
    pub const fn group(self) -> CounterGroupKind {
        match self {
            CounterKind::TaskClock
            | CounterKind::PageFaults
            | CounterKind::ContextSwitches
            | CounterKind::CpuMigrations => CounterGroupKind::Software,
            _ => CounterGroupKind::Hardware,
        }
    }
}

/// Counter deltas over one span (or summed over many). `None`: not measured.
///
/// Field names are the schema's; a Python writer fills the ones it has and omits the rest.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
#[allow(missing_docs)] // Each field is the counter of the same name in `CounterKind`.
pub struct CounterDeltas {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cycles: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instructions: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_references: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_misses: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub branch_instructions: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub branch_misses: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stalled_cycles_frontend: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stalled_cycles_backend: Option<u64>,
    /// Nanoseconds on CPU.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task_clock: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub page_faults: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context_switches: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_migrations: Option<u64>,
}

impl CounterDeltas {
    /// The value of one counter.
    pub fn get(&self, kind: CounterKind) -> Option<u64> {
        *self.slot(kind)
    }

    /// Sets one counter.
    pub fn set(&mut self, kind: CounterKind, value: Option<u64>) {
        *self.slot_mut(kind) = value;
    }

    /// True when no counter is set.
    pub fn is_empty(&self) -> bool {
        CounterKind::ALL.iter().all(|&k| self.get(k).is_none())
    }

    /// The counters set in `mask` (bit [`CounterKind::index`]) taken from `values`.
    pub fn from_array(mask: u16, values: &CounterArray) -> Self {
        let mut d = CounterDeltas::default();
        for k in CounterKind::ALL {
            if mask & (1 << k.index()) != 0 {
                d.set(k, Some(values[k.index()]));
            }
        }
        d
    }

    /// Adds `other` into `self`, counter by counter; a counter is set when either side has it.
    pub fn accumulate(&mut self, other: &CounterDeltas) {
        for k in CounterKind::ALL {
            let v = match (self.get(k), other.get(k)) {
                (Some(a), Some(b)) => Some(a.saturating_add(b)),
                (a, b) => a.or(b),
            };
            self.set(k, v);
        }
    }

    /// `self - other` per counter (saturating at 0), keeping `self`'s set counters.
    pub fn saturating_sub(&self, other: &CounterDeltas) -> CounterDeltas {
        let mut d = *self;
        for k in CounterKind::ALL {
            if let (Some(a), Some(b)) = (self.get(k), other.get(k)) {
                d.set(k, Some(a.saturating_sub(b)));
            }
        }
        d
    }

    fn slot(&self, kind: CounterKind) -> &Option<u64> {
        match kind {
            CounterKind::Cycles => &self.cycles,
            CounterKind::Instructions => &self.instructions,
            CounterKind::CacheReferences => &self.cache_references,
            CounterKind::CacheMisses => &self.cache_misses,
            CounterKind::BranchInstructions => &self.branch_instructions,
            CounterKind::BranchMisses => &self.branch_misses,
            CounterKind::StalledCyclesFrontend => &self.stalled_cycles_frontend,
            CounterKind::StalledCyclesBackend => &self.stalled_cycles_backend,
            CounterKind::TaskClock => &self.task_clock,
            CounterKind::PageFaults => &self.page_faults,
            CounterKind::ContextSwitches => &self.context_switches,
            CounterKind::CpuMigrations => &self.cpu_migrations,
        }
    }

    fn slot_mut(&mut self, kind: CounterKind) -> &mut Option<u64> {
        match kind {
            CounterKind::Cycles => &mut self.cycles,
            CounterKind::Instructions => &mut self.instructions,
            CounterKind::CacheReferences => &mut self.cache_references,
            CounterKind::CacheMisses => &mut self.cache_misses,
            CounterKind::BranchInstructions => &mut self.branch_instructions,
            CounterKind::BranchMisses => &mut self.branch_misses,
            CounterKind::StalledCyclesFrontend => &mut self.stalled_cycles_frontend,
            CounterKind::StalledCyclesBackend => &mut self.stalled_cycles_backend,
            CounterKind::TaskClock => &mut self.task_clock,
            CounterKind::PageFaults => &mut self.page_faults,
            CounterKind::ContextSwitches => &mut self.context_switches,
            CounterKind::CpuMigrations => &mut self.cpu_migrations,
        }
    }
}

/// Which counter groups to try to open in [`Mode::Counters`](crate::Mode::Counters).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CounterConfig {
    /// Try the hardware group. Default: true.
    pub hardware: bool,
    /// Try the software group. Default: true.
    pub software: bool,
}

impl Default for CounterConfig {
    fn default() -> Self {
        CounterConfig {
            hardware: true,
            software: true,
        }
    }
}

/// Whether one counter could be opened, and why not.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventAvailability {
    /// The counter.
    pub counter: CounterKind,
    /// It is counted.
    pub available: bool,
    /// Why it is not (the OS error and a hint), when it is not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Whether a counter group could be opened, with each event's own status.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct GroupAvailability {
    /// At least one event of the group is counted.
    pub available: bool,
    /// Why the group (or part of it) is missing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Kernel-side activity is excluded (needed when `perf_event_paranoid` >= 2 and the process
    /// lacks CAP_PERFMON; then context switches, which happen in the kernel, read 0).
    pub exclude_kernel: bool,
    /// Per event status.
    pub events: Vec<EventAvailability>,
}

/// What counters a thread (or the probe at profiler start) could open, and why not.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CounterAvailability {
    /// The hardware group.
    pub hardware: GroupAvailability,
    /// The software group.
    pub software: GroupAvailability,
    /// `/proc/sys/kernel/perf_event_paranoid` when readable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub perf_event_paranoid: Option<i32>,
}

impl CounterAvailability {
    /// Bit mask (bit [`CounterKind::index`]) of the counters that are counted.
    pub fn mask(&self) -> u16 {
        self.hardware
            .events
            .iter()
            .chain(&self.software.events)
            .filter(|e| e.available)
            .fold(0, |m, e| m | (1 << e.counter.index()))
    }

    /// Whether `kind` is counted.
    pub fn has(&self, kind: CounterKind) -> bool {
        self.mask() & (1 << kind.index()) != 0
    }

    /// Availability when counters were not requested (`reason` says so).
    pub fn not_requested(reason: &str) -> Self {
        let group = |g: CounterGroupKind| GroupAvailability {
            available: false,
            reason: Some(reason.to_owned()),
            exclude_kernel: false,
            events: CounterKind::ALL
                .iter()
                .filter(|k| k.group() == g)
                .map(|&counter| EventAvailability {
                    counter,
                    available: false,
                    reason: Some(reason.to_owned()),
                })
                .collect(),
        };
        CounterAvailability {
            hardware: group(CounterGroupKind::Hardware),
            software: group(CounterGroupKind::Software),
            perf_event_paranoid: read_paranoid(),
        }
    }
}

/// `/proc/sys/kernel/perf_event_paranoid`, if readable.
pub fn read_paranoid() -> Option<i32> {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// A short explanation of a `perf_event_open` error, with the OS error itself.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub(crate) fn explain(err: &std::io::Error, paranoid: Option<i32>) -> String {
    let hint = match err.raw_os_error() {
        Some(2) => "no such event on this CPU (no hardware PMU exposed, e.g. in a VM)",
        Some(13) | Some(1) => "permission denied (perf_event_paranoid or a seccomp filter)",
        Some(19) => "no such PMU device",
        Some(22) => "event configuration rejected by the kernel",
        Some(38) => "perf_event_open not implemented (seccomp filter or kernel without perf)",
        Some(95) => "event not supported on this CPU",
        Some(24) => "too many open files",
        _ => "perf_event_open failed",
    };
    match paranoid {
        Some(p) => format!("{hint}: {err}; perf_event_paranoid={p}"),
        None => format!("{hint}: {err}"),
    }
}

#[cfg(target_os = "linux")]
pub use linux::CounterSet;

#[cfg(not(target_os = "linux"))]
pub use other::CounterSet;

#[cfg(target_os = "linux")]
mod linux;

#[cfg(not(target_os = "linux"))]
mod other {
    use super::*;

    /// Counter groups need Linux's `perf_event_open`; elsewhere nothing opens.
    #[derive(Debug)]
    pub struct CounterSet;

    impl CounterSet {
        /// Never opens anything here.
        pub fn open(_config: CounterConfig) -> (Option<CounterSet>, CounterAvailability) {
            (
                None,
                CounterAvailability::not_requested("perf_event_open exists only on Linux"),
            )
        }
        /// No counters.
        pub fn mask(&self) -> u16 {
            0
        }
        /// Reads nothing.
        pub fn read(&mut self, _out: &mut CounterArray) -> bool {
            false
        }
        /// Always 1.
        pub fn running_fraction(&self) -> f64 {
            1.0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deltas_roundtrip_by_kind() {
        let mut d = CounterDeltas::default();
        assert!(d.is_empty());
        for (i, k) in CounterKind::ALL.iter().enumerate() {
            assert_eq!(k.index(), i);
            d.set(*k, Some(i as u64 + 1));
        }
        for (i, k) in CounterKind::ALL.iter().enumerate() {
            assert_eq!(d.get(*k), Some(i as u64 + 1));
        }
        let mut sum = d;
        sum.accumulate(&d);
        assert_eq!(sum.get(CounterKind::PageFaults), Some(20));
        assert_eq!(sum.saturating_sub(&d), d);
    }

    #[test]
    fn from_array_respects_mask() {
        let mut a = [0u64; NUM_COUNTERS];
        a[CounterKind::TaskClock.index()] = 7;
        a[CounterKind::Cycles.index()] = 9;
        let d = CounterDeltas::from_array(1 << CounterKind::TaskClock.index(), &a);
        assert_eq!(d.task_clock, Some(7));
        assert_eq!(d.cycles, None);
        let json = serde_json::to_string(&d).expect("serializes");
        assert_eq!(json, r#"{"task_clock":7}"#);
    }
}
