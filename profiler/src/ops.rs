//! Op names interned to small ids, so the hot path carries a `u16` and never a string.
//!
//! Names are registered at setup (well-known ones are pre-registered with fixed ids) and turned
//! back into strings only when a profile is collected. This module must not be consulted per
//! event: lookups by name take a lock.

use std::collections::HashMap;
use std::fmt;

use crate::error::ProfilerError;

/// A registered op name. Ids are only meaningful for the [`Profiler`](crate::Profiler) that
/// issued them, except the well-known ones in [`ops`](self), which every profiler shares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OpId(pub u16);

impl fmt::Display for OpId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "op#{}", self.0)
    }
}

/// Reading the sample's bytes.
pub const READ: OpId = OpId(0);
/// Decoding the image.
pub const DECODE: OpId = OpId(1);
/// Drawing random crop parameters.
pub const CROP_PARAMS: OpId = OpId(2);
/// Cropping.
pub const CROP: OpId = OpId(3);
/// Resizing.
pub const RESIZE: OpId = OpId(4);
/// Flipping.
pub const FLIP: OpId = OpId(5);
/// Converting to a tensor.
pub const TO_TENSOR: OpId = OpId(6);
/// Normalizing.
pub const NORMALIZE: OpId = OpId(7);
/// A fused kernel doing several ops in one pass.
pub const FUSED: OpId = OpId(8);
/// Collating samples into a batch.
pub const COLLATE: OpId = OpId(9);
/// The whole per-sample processing (a parent span around the ops above).
pub const PROCESS: OpId = OpId(10);
/// Touching a new batch buffer's pages for the first time (the page faults of a loader's first
/// batches, kept out of the op that would otherwise write them first).
pub const FIRST_TOUCH: OpId = OpId(11);

/// Names of the well-known ops, indexed by their id.
pub const WELL_KNOWN: [&str; 12] = [
    "read",
    "decode",
    "crop_params",
    "crop",
    "resize",
    "flip",
    "to_tensor",
    "normalize",
    "fused",
    "collate",
    "process",
    "first_touch",
];

/// The fixed id of a well-known op name, without a lock (for mapping another crate's op enum to
/// ids on the hot path); `None` for other names, which go through
/// [`Profiler::register_op`](crate::Profiler::register_op) at setup.
#[inline]
pub fn well_known(name: &str) -> Option<OpId> {
    WELL_KNOWN
        .iter()
        .position(|&n| n == name)
        .map(|i| OpId(i as u16))
}

/// Name <-> id table of one profiler. Guarded by a lock in the profiler; used at setup and at
/// collection only.
#[derive(Debug, Clone)]
pub(crate) struct OpTable {
    names: Vec<String>,
    ids: HashMap<String, OpId>,
}

impl OpTable {
    pub(crate) fn new() -> Self {
        let mut table = OpTable {
            names: Vec::with_capacity(32),
            ids: HashMap::with_capacity(32),
        };
        for name in WELL_KNOWN {
            // Cannot fail: a dozen names fit in u16.
            let _ = table.register(name);
        }
        table
    }

    /// The id of `name`, registering it if new.
    pub(crate) fn register(&mut self, name: &str) -> Result<OpId, ProfilerError> {
        if let Some(&id) = self.ids.get(name) {
            return Ok(id);
        }
        let id = u16::try_from(self.names.len())
            .map(OpId)
            .map_err(|_| ProfilerError::TooManyOps { name: name.into() })?;
        self.names.push(name.to_owned());
        self.ids.insert(name.to_owned(), id);
        Ok(id)
    }

    /// The id of `name`, if registered.
    pub(crate) fn lookup(&self, name: &str) -> Option<OpId> {
        self.ids.get(name).copied()
    }

    pub(crate) fn name(&self, id: OpId) -> Option<&str> {
        self.names.get(usize::from(id.0)).map(String::as_str)
    }

    pub(crate) fn names(&self) -> &[String] {
        &self.names
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn well_known_ids_are_fixed() {
        let t = OpTable::new();
        assert_eq!(t.name(READ), Some("read"));
        assert_eq!(t.name(COLLATE), Some("collate"));
        assert_eq!(t.name(PROCESS), Some("process"));
        for (i, n) in WELL_KNOWN.iter().enumerate() {
            assert_eq!(t.name(OpId(i as u16)), Some(*n));
        }
    }

    #[test]
    fn well_known_lookup_matches_the_table() {
        let t = OpTable::new();
        for n in WELL_KNOWN {
            assert_eq!(well_known(n), t.lookup(n));
        }
        assert_eq!(well_known("to_tensor"), Some(TO_TENSOR));
        assert_eq!(well_known("random_erasing"), None);
    }

    #[test]
    fn register_is_idempotent_and_bounded() {
        let mut t = OpTable::new();
        let a = t.register("my_op").expect("room");
        assert_eq!(a, OpId(WELL_KNOWN.len() as u16));
        assert_eq!(t.register("my_op").expect("room"), a);
        assert_eq!(t.register("decode").expect("room"), DECODE);
        for i in t.names().len()..=usize::from(u16::MAX) {
            t.register(&format!("op{i}")).expect("room");
        }
        assert!(matches!(
            t.register("one_too_many"),
            Err(ProfilerError::TooManyOps { .. })
        ));
    }
}
