//! Shard URLs: brace patterns expanded to lists, and each URL resolved to where it lives.
//!
//! Pure string work: must not touch the file system or the network.

use std::path::PathBuf;

/// Where one shard (or index) lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Location {
    /// A local file (a plain path or a `file://` URL).
    Local(PathBuf),
    /// An object in a store: `scheme://authority/path` with the scheme one of `s3`, `gs`,
    /// `az`, `http`, `https`.
    Remote {
        /// `s3`, `gs`, `az`, `http` or `https`.
        scheme: String,
        /// The bucket or container (`host[:port]` for HTTP).
        authority: String,
        /// The object's path inside it, without a leading `/`.
        path: String,
    },
}

const REMOTE_SCHEMES: [&str; 5] = ["s3", "gs", "az", "http", "https"];

impl Location {
    /// Parses a URL or a path; fails on an unknown scheme or a URL without a bucket/host.
    pub fn parse(url: &str) -> Result<Self, String> {
        let Some((scheme, rest)) = url.split_once("://") else {
            return Ok(Location::Local(PathBuf::from(url)));
        };
        let scheme = scheme.to_ascii_lowercase();
        if scheme == "file" {
            // file:///abs/path (empty host) or file://localhost/abs/path.
            let path = rest.strip_prefix("localhost").unwrap_or(rest);
            if !path.starts_with('/') {
                return Err(format!("{url}: a file:// URL needs an absolute path"));
            }
            return Ok(Location::Local(PathBuf::from(path)));
        }
        if !REMOTE_SCHEMES.contains(&scheme.as_str()) {
            return Err(format!(
                "{url}: unsupported scheme {scheme:?} (use a path, file://, s3://, gs://, az://, \
                 http:// or https://)"
            ));
        }
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        if authority.is_empty() {
            return Err(format!("{url}: no bucket or host"));
        }
        Ok(Location::Remote {
            scheme,
            authority: authority.to_owned(),
            path: path.to_owned(),
        })
    }
}

/// Resolves `url` against the URL of the index that names it: absolute URLs and absolute
/// paths stay as they are, relative ones are taken from the index's folder.
pub fn join(index_url: &str, url: &str) -> String {
    if url.contains("://") || url.starts_with('/') {
        return url.to_owned();
    }
    match index_url.rfind('/') {
        Some(slash) => format!("{}/{url}", &index_url[..slash]),
        None => url.to_owned(),
    }
}

/// The folder of the first shard URL, where the default index sits.
pub fn default_index_url(first_shard: &str, name: &str) -> String {
    join(first_shard, name)
}

/// Expands brace patterns as WebDataset (and the shell) do: `{000..099}` is a zero-padded
/// range (the width of the first bound), `{a,b}` a list; several braces multiply out left to
/// right. Fails on an unclosed brace or a reversed or malformed range.
pub fn expand_braces(pattern: &str) -> Result<Vec<String>, String> {
    let Some(open) = pattern.find('{') else {
        return Ok(vec![pattern.to_owned()]);
    };
    let close = pattern[open..]
        .find('}')
        .map(|c| open + c)
        .ok_or_else(|| format!("{pattern}: unclosed '{{'"))?;
    let (head, body, tail) = (
        &pattern[..open],
        &pattern[open + 1..close],
        &pattern[close + 1..],
    );
    let choices: Vec<String> = if let Some((lo, hi)) = body.split_once("..") {
        let bad = || format!("{pattern}: {{{body}}} is not a range of two non-negative integers");
        let (a, b) = (
            lo.parse::<u64>().map_err(|_| bad())?,
            hi.parse::<u64>().map_err(|_| bad())?,
        );
        if a > b {
            return Err(format!("{pattern}: the range {{{body}}} runs backwards"));
        }
        let width = lo.len();
        (a..=b).map(|n| format!("{n:0width$}")).collect()
    } else {
        body.split(',').map(str::to_owned).collect()
    };
    let rest = expand_braces(tail)?;
    let mut out = Vec::with_capacity(choices.len() * rest.len());
    for c in &choices {
        for r in &rest {
            out.push(format!("{head}{c}{r}"));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn braces_expand_like_webdataset() {
        assert_eq!(
            expand_braces("s3://b/shard-{000..002}.tar").expect("valid"),
            [
                "s3://b/shard-000.tar",
                "s3://b/shard-001.tar",
                "s3://b/shard-002.tar"
            ]
        );
        assert_eq!(
            expand_braces("{a,b}-{8..10}").expect("valid"),
            ["a-8", "a-9", "a-10", "b-8", "b-9", "b-10"]
        );
        assert_eq!(expand_braces("plain.tar").expect("valid"), ["plain.tar"]);
        assert!(expand_braces("x-{3..1}").is_err());
        assert!(expand_braces("x-{1..").is_err());
        assert!(expand_braces("x-{a..b}").is_err());
    }

    #[test]
    fn locations() {
        assert_eq!(
            Location::parse("/data/a.tar").expect("valid"),
            Location::Local("/data/a.tar".into())
        );
        assert_eq!(
            Location::parse("file:///data/a.tar").expect("valid"),
            Location::Local("/data/a.tar".into())
        );
        assert_eq!(
            Location::parse("s3://bucket/dir/a.tar").expect("valid"),
            Location::Remote {
                scheme: "s3".into(),
                authority: "bucket".into(),
                path: "dir/a.tar".into()
            }
        );
        assert!(Location::parse("ftp://h/a.tar").is_err());
        assert!(Location::parse("s3:///a.tar").is_err());
        assert!(Location::parse("file://relative").is_err());
    }

    #[test]
    fn joins_relative_urls_to_the_index_folder() {
        assert_eq!(join("s3://b/d/index.json", "a.tar"), "s3://b/d/a.tar");
        assert_eq!(join("s3://b/index.json", "a.tar"), "s3://b/a.tar");
        assert_eq!(join("/x/index.json", "a.tar"), "/x/a.tar");
        assert_eq!(join("index.json", "a.tar"), "a.tar");
        assert_eq!(join("s3://b/index.json", "gs://c/a.tar"), "gs://c/a.tar");
        assert_eq!(
            join("http://h:8/d/index.json", "a.tar"),
            "http://h:8/d/a.tar"
        );
    }
}
