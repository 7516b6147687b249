//! Reading a shard's tar members into samples: WebDataset's grouping of members by key, the
//! image member's place in the tar, the label from `.cls` or a `.json` field.
//!
//! Works on a shard already in memory; must not fetch anything, and keeps no image bytes (only
//! where they lie).

use std::io::{self, Cursor, Read};

use super::index::SampleEntry;

/// Where a sample's label comes from when a shard is read without an index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LabelSource {
    /// The `KEY.cls` member: an ASCII decimal integer, whitespace trimmed.
    Cls,
    /// A field of the `KEY.json` member's object (an integer).
    Json(String),
}

impl LabelSource {
    /// `"cls"` for the `.cls` member, `"json"` for the `label` field of the `.json` member,
    /// `"json.FIELD"` for another field.
    pub fn parse(spec: &str) -> Result<Self, String> {
        match spec {
            "cls" => Ok(LabelSource::Cls),
            "json" => Ok(LabelSource::Json("label".to_owned())),
            _ => match spec.strip_prefix("json.") {
                Some(field) if !field.is_empty() => Ok(LabelSource::Json(field.to_owned())),
                _ => Err(format!(
                    "label_key {spec:?}: use \"cls\", \"json\" or \"json.FIELD\""
                )),
            },
        }
    }
}

/// Image member extensions, lowercase without the dot (torchvision's `IMG_EXTENSIONS`).
const IMAGE_EXTENSIONS: [&str; 9] = [
    "jpg", "jpeg", "png", "ppm", "bmp", "pgm", "tif", "tiff", "webp",
];

/// WebDataset's split of a member path: the key is the path up to the first `.` of the last
/// component, the extension the rest (lowercased). `None` for names without a dot.
pub fn split_key(path: &str) -> Option<(&str, String)> {
    let base_start = path.rfind('/').map_or(0, |i| i + 1);
    let dot = base_start + path[base_start..].find('.')?;
    Some((&path[..dot], path[dot + 1..].to_ascii_lowercase()))
}

/// The samples of a shard, in tar order. Fails, naming the member (the caller names the
/// shard), on a tar that does not parse, a truncated member, a key without an image
/// or a label, a label that does not parse, or members of one key that are not adjacent.
pub fn read_samples(shard: &[u8], labels: &LabelSource) -> io::Result<Vec<SampleEntry>> {
    let corrupt = |what: String| io::Error::new(io::ErrorKind::InvalidData, what);
    let mut archive = tar::Archive::new(Cursor::new(shard));
    let entries = archive
        .entries_with_seek()
        .map_err(|e| corrupt(format!("not a tar file: {e}")))?;
    let mut samples = Vec::new();
    let mut open: Option<Pending> = None;
    let mut done_keys = std::collections::HashSet::new();
    for entry in entries {
        let mut entry = entry.map_err(|e| corrupt(format!("bad tar header: {e}")))?;
        if !matches!(
            entry.header().entry_type(),
            tar::EntryType::Regular | tar::EntryType::Continuous
        ) {
            continue;
        }
        let path = entry
            .path()
            .map_err(|e| corrupt(format!("bad member name: {e}")))?
            .to_string_lossy()
            .into_owned();
        let (offset, size) = (entry.raw_file_position(), entry.size());
        if offset
            .checked_add(size)
            .is_none_or(|end| end > shard.len() as u64)
        {
            return Err(corrupt(format!(
                "member {path}: truncated ({size} bytes at offset {offset}, the shard has {})",
                shard.len()
            )));
        }
        let Some((key, ext)) = split_key(&path) else {
            continue;
        };
        // WebDataset's own metadata members (`__key__` and friends) are not samples.
        if key.rsplit('/').next().is_some_and(|b| b.starts_with("__")) {
            continue;
        }
        if open.as_ref().is_none_or(|p| p.key != key) {
            if let Some(p) = open.take() {
                samples.push(p.finish(labels)?);
                done_keys.insert(samples.last().map(|s| s.key.clone()).unwrap_or_default());
            }
            if done_keys.contains(key) {
                return Err(corrupt(format!(
                    "member {path}: the members of key {key:?} are not adjacent"
                )));
            }
            open = Some(Pending::new(key));
        }
        let Some(p) = open.as_mut() else { continue };
        let wants_text = match labels {
            LabelSource::Cls => ext == "cls",
            LabelSource::Json(_) => ext == "json",
        };
        if wants_text {
            let mut text = Vec::new();
            entry
                .read_to_end(&mut text)
                .map_err(|e| corrupt(format!("member {path}: {e}")))?;
            p.label_text = Some((path, text));
        } else if p.image.is_none() && IMAGE_EXTENSIONS.contains(&ext.as_str()) {
            p.image = Some((path, offset, size));
        }
    }
    if let Some(p) = open.take() {
        samples.push(p.finish(labels)?);
    }
    Ok(samples)
}

/// The members of the key being read.
struct Pending {
    key: String,
    image: Option<(String, u64, u64)>,
    label_text: Option<(String, Vec<u8>)>,
}

impl Pending {
    fn new(key: &str) -> Self {
        Pending {
            key: key.to_owned(),
            image: None,
            label_text: None,
        }
    }

    fn finish(self, labels: &LabelSource) -> io::Result<SampleEntry> {
        let corrupt = |what: String| io::Error::new(io::ErrorKind::InvalidData, what);
        let key = self.key;
        let Some((_, offset, size)) = self.image else {
            return Err(corrupt(format!(
                "sample {key:?} has no image member (one of .{})",
                IMAGE_EXTENSIONS.join(", .")
            )));
        };
        let Some((member, text)) = self.label_text else {
            let want = match labels {
                LabelSource::Cls => format!("{key}.cls"),
                LabelSource::Json(_) => format!("{key}.json"),
            };
            return Err(corrupt(format!(
                "member {want} is missing: sample {key:?} has no label"
            )));
        };
        let label = match labels {
            LabelSource::Cls => std::str::from_utf8(&text)
                .ok()
                .and_then(|t| t.trim().parse::<i64>().ok())
                .ok_or_else(|| {
                    corrupt(format!(
                        "member {member}: {:?} is not an integer label",
                        String::from_utf8_lossy(&text[..text.len().min(40)])
                    ))
                })?,
            LabelSource::Json(field) => {
                let value: serde_json::Value = serde_json::from_slice(&text)
                    .map_err(|e| corrupt(format!("member {member}: not JSON: {e}")))?;
                value
                    .get(field)
                    .and_then(serde_json::Value::as_i64)
                    .ok_or_else(|| {
                        corrupt(format!("member {member}: no integer field {field:?}"))
                    })?
            }
        };
        Ok(SampleEntry {
            key,
            offset,
            size,
            label,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shard(members: &[(&str, &[u8])]) -> Vec<u8> {
        let mut builder = tar::Builder::new(Vec::new());
        for (name, data) in members {
            let mut header = tar::Header::new_ustar();
            header.set_size(data.len() as u64);
            header.set_mode(0o644);
            header.set_cksum();
            builder
                .append_data(&mut header, name, *data)
                .expect("in memory");
        }
        builder.into_inner().expect("in memory")
    }

    #[test]
    fn keys_split_at_the_first_dot_of_the_basename() {
        assert_eq!(
            split_key("a/b.c/d.seg.JPG"),
            Some(("a/b.c/d", "seg.jpg".to_owned()))
        );
        assert_eq!(split_key("x.cls"), Some(("x", "cls".to_owned())));
        assert_eq!(split_key("noext"), None);
    }

    #[test]
    fn groups_members_and_locates_images() {
        let tar = shard(&[
            ("d/a.jpg", b"AAAA"),
            ("d/a.cls", b" 3\n"),
            ("d/b.cls", b"7"),
            ("d/b.png", b"BBBBBB"),
            ("d/b.txt", b"ignored"),
        ]);
        let got = read_samples(&tar, &LabelSource::Cls).expect("valid");
        assert_eq!(got.len(), 2);
        assert_eq!((got[0].key.as_str(), got[0].label), ("d/a", 3));
        assert_eq!((got[1].key.as_str(), got[1].label), ("d/b", 7));
        let at = |s: &SampleEntry| &tar[s.offset as usize..(s.offset + s.size) as usize];
        assert_eq!(at(&got[0]), b"AAAA");
        assert_eq!(at(&got[1]), b"BBBBBB");

        let tar = shard(&[("a.jpg", b"A"), ("a.json", br#"{"y": 5, "label": 2}"#)]);
        let got = read_samples(&tar, &LabelSource::Json("y".into())).expect("valid");
        assert_eq!(got[0].label, 5);
    }

    #[test]
    fn errors_name_the_member() {
        let tar = shard(&[("a.jpg", b"A"), ("a.cls", b"x")]);
        let err = read_samples(&tar, &LabelSource::Cls).expect_err("bad label");
        let msg = err.to_string();
        assert!(msg.contains("a.cls"), "{msg}");

        let tar = shard(&[("a.jpg", b"A")]);
        let msg = read_samples(&tar, &LabelSource::Cls)
            .expect_err("no label")
            .to_string();
        assert!(msg.contains("a.cls") && msg.contains("missing"), "{msg}");

        let tar = shard(&[
            ("a.jpg", b"A"),
            ("a.cls", b"1"),
            ("b.jpg", b"B"),
            ("b.cls", b"1"),
            ("a.png", b"A"),
        ]);
        let msg = read_samples(&tar, &LabelSource::Cls)
            .expect_err("split")
            .to_string();
        assert!(msg.contains("adjacent"), "{msg}");

        let tar = shard(&[("a.jpg", &[7u8; 2000]), ("a.cls", b"1")]);
        let msg = read_samples(&tar[..1200], &LabelSource::Cls)
            .expect_err("truncated")
            .to_string();
        assert!(msg.contains("a.jpg") && msg.contains("truncated"), "{msg}");
    }
}
