//! The shard index: which samples each shard holds and where each image's bytes lie inside it.
//!
//! The JSON written next to the shards (`index.json` by default) by `ferroloader shard`:
//!
//! ```json
//! {"format": "ferroloader-shards", "version": 1, "num_samples": 3,
//!  "shards": [{"url": "shard-000000.tar", "num_samples": 3, "bytes": 30720,
//!              "samples": [{"key": "n01/img1", "offset": 1536, "size": 4810, "label": 0}, ...]}]}
//! ```
//!
//! `url` is relative to the index's own location or absolute; `offset`/`size` locate the image
//! member's data inside the tar, so one sample is one range request and a shard one GET. This
//! module only declares, parses and checks the format; it must not read shards or the network.

use serde::{Deserialize, Serialize};

/// The `format` field of every index.
pub const INDEX_FORMAT: &str = "ferroloader-shards";
/// The index version this crate reads and writes.
pub const INDEX_VERSION: u32 = 1;
/// The index's file name when none is given.
pub const DEFAULT_INDEX_NAME: &str = "index.json";

/// A whole shard index.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardIndex {
    /// Always [`INDEX_FORMAT`].
    pub format: String,
    /// Always [`INDEX_VERSION`].
    pub version: u32,
    /// The shards, in dataset order (sample indices run through them in this order).
    pub shards: Vec<ShardEntry>,
    /// Sum of the shards' `num_samples`.
    pub num_samples: u64,
    /// Class names in label order, when the writer's source had them (an ImageFolder, a file
    /// list with class-name labels).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub classes: Option<Vec<String>>,
    /// Whether a reader must turn each image upright per its EXIF orientation, as the source
    /// the shards were written from did when it decoded them (a Hugging Face `Image()`
    /// column); the bytes are stored unchanged either way. Absent means false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub exif_transpose: bool,
    /// Whether the source gave its images as one channel (Pillow's `L`: a grayscale Hugging
    /// Face dataset, as MNIST on the Hub), which a reader then decodes them to, not RGB.
    /// Absent means false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub grayscale: bool,
}

/// One shard of a [`ShardIndex`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardEntry {
    /// The shard's URL or path, relative to the index or absolute.
    pub url: String,
    /// Number of samples, `samples.len()`.
    pub num_samples: u64,
    /// The tar's size in bytes.
    pub bytes: u64,
    /// Its samples, in tar order.
    pub samples: Vec<SampleEntry>,
}

/// One sample of a [`ShardEntry`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SampleEntry {
    /// The WebDataset key (member path up to the first `.` of its last component).
    pub key: String,
    /// Offset of the image member's data in the tar.
    pub offset: u64,
    /// Length of the image member's data.
    pub size: u64,
    /// The class label.
    pub label: i64,
}

impl ShardIndex {
    /// An index over `shards`, with `num_samples` summed.
    pub fn new(shards: Vec<ShardEntry>) -> Self {
        let num_samples = shards.iter().map(|s| s.num_samples).sum();
        ShardIndex {
            format: INDEX_FORMAT.to_owned(),
            version: INDEX_VERSION,
            shards,
            num_samples,
            classes: None,
            exif_transpose: false,
            grayscale: false,
        }
    }

    /// Parses and checks an index; the error says what is wrong (the caller adds where it is).
    pub fn from_json(text: &[u8]) -> Result<Self, String> {
        let index: ShardIndex =
            serde_json::from_slice(text).map_err(|e| format!("not a shard index: {e}"))?;
        index.check()?;
        Ok(index)
    }

    /// Checks the invariants: format and version, counts that add up, every sample inside
    /// its shard.
    pub fn check(&self) -> Result<(), String> {
        if self.format != INDEX_FORMAT {
            return Err(format!(
                "format is {:?}, expected {INDEX_FORMAT:?}",
                self.format
            ));
        }
        if self.version != INDEX_VERSION {
            return Err(format!(
                "version {} is not supported (this build reads version {INDEX_VERSION})",
                self.version
            ));
        }
        let mut total = 0u64;
        for shard in &self.shards {
            if shard.num_samples != shard.samples.len() as u64 {
                return Err(format!(
                    "shard {:?}: num_samples is {} but {} samples are listed",
                    shard.url,
                    shard.num_samples,
                    shard.samples.len()
                ));
            }
            for s in &shard.samples {
                let end = s.offset.checked_add(s.size);
                if end.is_none_or(|end| end > shard.bytes) {
                    return Err(format!(
                        "shard {:?}: sample {:?} ({} bytes at {}) lies past the shard's {} bytes",
                        shard.url, s.key, s.size, s.offset, shard.bytes
                    ));
                }
            }
            total += shard.num_samples;
        }
        if total != self.num_samples {
            return Err(format!(
                "num_samples is {} but the shards hold {total}",
                self.num_samples
            ));
        }
        Ok(())
    }

    /// The index as JSON.
    pub fn to_json(&self) -> String {
        // Plain data with string keys: serialization cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(key: &str, offset: u64, size: u64) -> SampleEntry {
        SampleEntry {
            key: key.to_owned(),
            offset,
            size,
            label: 1,
        }
    }

    #[test]
    fn round_trips_and_checks() {
        let index = ShardIndex::new(vec![ShardEntry {
            url: "a.tar".into(),
            num_samples: 2,
            bytes: 4096,
            samples: vec![sample("x", 512, 10), sample("y", 1536, 100)],
        }]);
        assert_eq!(index.num_samples, 2);
        let back = ShardIndex::from_json(index.to_json().as_bytes()).expect("valid");
        assert_eq!(back, index);

        let mut bad = index.clone();
        bad.shards[0].samples[1].offset = 4090;
        let err = ShardIndex::from_json(bad.to_json().as_bytes()).expect_err("past the end");
        assert!(err.contains("\"y\"") && err.contains("past"), "{err}");

        let mut bad = index.clone();
        bad.num_samples = 3;
        assert!(ShardIndex::from_json(bad.to_json().as_bytes()).is_err());

        let mut bad = index;
        bad.format = "other".into();
        let err = ShardIndex::from_json(bad.to_json().as_bytes()).expect_err("format");
        assert!(err.contains("format"), "{err}");
        assert!(ShardIndex::from_json(b"{}").is_err());
    }
}
