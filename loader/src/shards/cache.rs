//! The local shard cache: whole shards kept on disk so later epochs read them without the
//! network, under a size limit, least recently used evicted first.
//!
//! A shard enters the cache only complete: it is written to a temporary file in the cache
//! folder and renamed into place, so a crash or a concurrent reader never sees half a shard.
//! File names are the BLAKE3 hash of the URL. Must not fetch anything itself.

use std::collections::HashMap;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

/// A folder of cached shards with a size limit.
#[derive(Debug)]
pub struct ShardCache {
    dir: PathBuf,
    limit: Option<u64>,
    /// File name -> (size, last use tick); the tick orders evictions.
    entries: Mutex<Entries>,
}

#[derive(Debug, Default)]
struct Entries {
    files: HashMap<String, (u64, u64)>,
    tick: u64,
    total: u64,
}

const SUFFIX: &str = ".tar";

impl ShardCache {
    /// Opens (creating it if needed) the cache in `dir`; the shards already there count,
    /// oldest modification first in line for eviction. `limit`: most bytes kept, `None` for
    /// no limit.
    pub fn open(dir: &Path, limit: Option<u64>) -> io::Result<Self> {
        fs::create_dir_all(dir)?;
        let mut found = Vec::new();
        for entry in fs::read_dir(dir)? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if !name.ends_with(SUFFIX) {
                continue;
            }
            let meta = entry.metadata()?;
            let modified = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
            found.push((modified, name, meta.len()));
        }
        found.sort();
        let mut entries = Entries::default();
        for (_, name, size) in found {
            entries.tick += 1;
            entries.total += size;
            entries.files.insert(name, (size, entries.tick));
        }
        Ok(ShardCache {
            dir: dir.to_owned(),
            limit,
            entries: Mutex::new(entries),
        })
    }

    fn name(url: &str) -> String {
        format!("{}{SUFFIX}", blake3::hash(url.as_bytes()).to_hex())
    }

    /// Whether the cache holds a copy of `url` (without reading or marking it).
    pub fn contains(&self, url: &str) -> bool {
        self.lock().files.contains_key(&Self::name(url))
    }

    /// The cached copy of `url`, if any (and marks it used).
    pub fn get(&self, url: &str) -> Option<Vec<u8>> {
        let name = Self::name(url);
        let mut entries = self.lock();
        if !entries.files.contains_key(&name) {
            return None;
        }
        match fs::read(self.dir.join(&name)) {
            Ok(bytes) => {
                entries.tick += 1;
                let tick = entries.tick;
                if let Some(e) = entries.files.get_mut(&name) {
                    e.1 = tick;
                }
                Some(bytes)
            }
            Err(_) => {
                // Removed behind our back: forget it, the caller fetches again.
                if let Some((size, _)) = entries.files.remove(&name) {
                    entries.total -= size;
                }
                None
            }
        }
    }

    /// Stores `bytes` as the copy of `url`, then evicts the least recently used shards until
    /// the cache fits its limit. A shard larger than the limit is not stored.
    pub fn put(&self, url: &str, bytes: &[u8]) -> io::Result<()> {
        let size = bytes.len() as u64;
        if self.limit.is_some_and(|l| size > l) {
            return Ok(());
        }
        let name = Self::name(url);
        let tmp = self.dir.join(format!(".{name}.{}.tmp", std::process::id()));
        let mut file = fs::File::create(&tmp)?;
        file.write_all(bytes)?;
        file.sync_data()?;
        drop(file);
        fs::rename(&tmp, self.dir.join(&name))?;
        let mut entries = self.lock();
        entries.tick += 1;
        let tick = entries.tick;
        if let Some((old, _)) = entries.files.insert(name, (size, tick)) {
            entries.total -= old;
        }
        entries.total += size;
        if let Some(limit) = self.limit {
            while entries.total > limit {
                let Some(oldest) = entries
                    .files
                    .iter()
                    .min_by_key(|(_, (_, t))| *t)
                    .map(|(n, _)| n.clone())
                else {
                    break;
                };
                if let Some((size, _)) = entries.files.remove(&oldest) {
                    entries.total -= size;
                }
                // Already gone is as good as removed.
                let _ = fs::remove_file(self.dir.join(&oldest));
            }
        }
        Ok(())
    }

    /// Bytes held.
    pub fn total_bytes(&self) -> u64 {
        self.lock().total
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_the_least_recently_used_and_reopens() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = ShardCache::open(dir.path(), Some(25)).expect("open");
        cache.put("a", &[1; 10]).expect("put");
        cache.put("b", &[2; 10]).expect("put");
        assert_eq!(cache.get("a"), Some(vec![1; 10])); // a is now the most recent
        cache.put("c", &[3; 10]).expect("put"); // 30 > 25: b goes
        assert_eq!(cache.get("b"), None);
        assert_eq!(cache.get("a"), Some(vec![1; 10]));
        assert_eq!(cache.total_bytes(), 20);
        cache.put("huge", &[0; 26]).expect("put is a no-op");
        assert_eq!(cache.get("huge"), None);
        let files = fs::read_dir(dir.path()).expect("list").count();
        assert_eq!(files, 2, "no temporary files left behind");
        drop(cache);
        let again = ShardCache::open(dir.path(), Some(25)).expect("reopen");
        assert_eq!(again.total_bytes(), 20);
        assert_eq!(again.get("c"), Some(vec![3; 10]));
    }
}
