//! The S3 settings of an AWS profile: `~/.aws/credentials` and `~/.aws/config`, read as the AWS
//! SDKs and CLI read them, for users whose credentials live there (`aws configure`) rather than
//! in `AWS_*` variables, which `object_store` reads by itself and which win over a profile.
//!
//! Must not fetch credentials (SSO, `credential_process`, assumed roles): a profile that only
//! names such a source is an error that says how to export its credentials instead, not a
//! silent fall-through to the instance metadata service.

use std::path::{Path, PathBuf};

use ini::Ini;

/// Keys of a profile that obtain credentials from somewhere else, which this module does not
/// follow.
const INDIRECT_KEYS: &[&str] = &[
    "sso_session",
    "sso_start_url",
    "credential_process",
    "role_arn",
    "credential_source",
    "web_identity_token_file",
];

/// The S3 settings the selected profile adds to the environment's, as `object_store`
/// configuration keys with their values: static credentials (unless `AWS_ACCESS_KEY_ID` is
/// set, a web identity token is configured or `credentials_given`: the caller has its own),
/// `region` and `endpoint_url` (unless their
/// variables are set), and permission for plain HTTP when the endpoint in use is `http://`
/// (as the SDKs take it; `AWS_ALLOW_HTTP` still decides when set). `env` looks up an
/// environment variable; the profile is `AWS_PROFILE` (else `default`), the files
/// `AWS_SHARED_CREDENTIALS_FILE` and `AWS_CONFIG_FILE` (else under `$HOME/.aws`).
///
/// Fails, naming the files and the profile, when `AWS_PROFILE` names a profile neither file
/// has, when a file cannot be parsed, or when the profile's credentials come from a source
/// (SSO, `credential_process`, an assumed role) and none are given or in the environment.
pub fn s3_settings(
    env: &dyn Fn(&str) -> Option<String>,
    credentials_given: bool,
) -> Result<Vec<(String, String)>, String> {
    let home = env("HOME").map(PathBuf::from);
    let file = |var: &str, name: &str| {
        env(var)
            .map(PathBuf::from)
            .or_else(|| home.as_ref().map(|h| h.join(".aws").join(name)))
    };
    let credentials_path = file("AWS_SHARED_CREDENTIALS_FILE", "credentials");
    let config_path = file("AWS_CONFIG_FILE", "config");
    let named = env("AWS_PROFILE").filter(|p| !p.is_empty());
    let profile = named.clone().unwrap_or_else(|| "default".to_owned());

    // The credentials file's sections are bare profile names; the config file's are
    // `profile NAME`, except `default`.
    let credentials = load(credentials_path.as_deref())?;
    let config = load(config_path.as_deref())?;
    let config_section = if profile == "default" {
        "default".to_owned()
    } else {
        format!("profile {profile}")
    };
    let from_credentials = |key: &str| section_value(credentials.as_ref(), &profile, key);
    let from_config = |key: &str| section_value(config.as_ref(), &config_section, key);
    let has_section =
        |ini: Option<&Ini>, name: &str| ini.is_some_and(|i| i.section(Some(name)).is_some());
    let found = has_section(credentials.as_ref(), &profile)
        || has_section(config.as_ref(), &config_section);
    if !found && named.is_some() {
        return Err(format!(
            "AWS_PROFILE={profile}: no such profile in {} or {}",
            shown(credentials_path.as_deref()),
            shown(config_path.as_deref())
        ));
    }
    // The credentials file wins over the config file for the same key, as in the SDKs.
    let value = |key: &str| from_credentials(key).or_else(|| from_config(key));

    let mut settings = Vec::new();
    let have_keys = credentials_given
        || env("AWS_ACCESS_KEY_ID").is_some()
        || env("AWS_WEB_IDENTITY_TOKEN_FILE").is_some();
    if !have_keys {
        match (value("aws_access_key_id"), value("aws_secret_access_key")) {
            (Some(id), Some(secret)) => {
                settings.push(("aws_access_key_id".to_owned(), id));
                settings.push(("aws_secret_access_key".to_owned(), secret));
                if let Some(token) = value("aws_session_token") {
                    settings.push(("aws_session_token".to_owned(), token));
                }
            }
            _ => {
                if let Some(key) = INDIRECT_KEYS.iter().find(|k| value(k).is_some()) {
                    return Err(format!(
                        "profile {profile} ({}) gets its credentials through `{key}`, which \
                         ferroloader does not follow: export them first (`eval \"$(aws \
                         configure export-credentials --profile {profile} --format env)\"`) or \
                         pass them in storage_options",
                        shown(config_path.as_deref())
                    ));
                }
            }
        }
    }
    if env("AWS_REGION").is_none() && env("AWS_DEFAULT_REGION").is_none() {
        if let Some(region) = value("region") {
            settings.push(("aws_region".to_owned(), region));
        }
    }
    let env_endpoint = env("AWS_ENDPOINT_URL_S3").or_else(|| env("AWS_ENDPOINT_URL"));
    let endpoint = match env_endpoint {
        Some(e) => Some(e),
        None => value("endpoint_url").inspect(|e| {
            settings.push(("aws_endpoint".to_owned(), e.clone()));
        }),
    };
    if env("AWS_ALLOW_HTTP").is_none() && endpoint.is_some_and(|e| e.starts_with("http://")) {
        settings.push(("aws_allow_http".to_owned(), "true".to_owned()));
    }
    Ok(settings)
}

/// The parsed file at `path`; `None` when there is no such file.
fn load(path: Option<&Path>) -> Result<Option<Ini>, String> {
    let Some(path) = path else {
        return Ok(None);
    };
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    // No escapes: a secret key may hold any character but a newline.
    Ini::load_from_str_noescape(&text)
        .map(Some)
        .map_err(|e| format!("{}: {e}", path.display()))
}

fn section_value(ini: Option<&Ini>, section: &str, key: &str) -> Option<String> {
    ini?.get_from(Some(section), key)
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_owned)
}

fn shown(path: Option<&Path>) -> String {
    path.map_or_else(
        || "(no file: HOME unset)".to_owned(),
        |p| p.display().to_string(),
    )
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    struct Setup {
        dir: tempfile::TempDir,
        env: HashMap<String, String>,
    }

    impl Setup {
        /// `~/.aws/credentials` and `~/.aws/config` under a temporary HOME.
        fn new(credentials: &str, config: &str) -> Self {
            let dir = tempfile::tempdir().expect("tempdir");
            std::fs::create_dir(dir.path().join(".aws")).expect("mkdir");
            std::fs::write(dir.path().join(".aws/credentials"), credentials).expect("write");
            std::fs::write(dir.path().join(".aws/config"), config).expect("write");
            let mut env = HashMap::new();
            env.insert("HOME".to_owned(), dir.path().display().to_string());
            Setup { dir, env }
        }

        fn with(mut self, var: &str, value: &str) -> Self {
            self.env.insert(var.to_owned(), value.to_owned());
            self
        }

        fn settings(&self) -> Result<Vec<(String, String)>, String> {
            s3_settings(&|k| self.env.get(k).cloned(), false)
        }

        fn map(&self) -> HashMap<String, String> {
            self.settings().expect("settings").into_iter().collect()
        }
    }

    const CREDENTIALS: &str = "\
# a comment
[default]
aws_access_key_id = AKDEFAULT
aws_secret_access_key = sk/with+slash=

[work]
aws_access_key_id=AKWORK
aws_secret_access_key=SKWORK
aws_session_token = TOKEN
";

    const CONFIG: &str = "\
[default]
region = eu-west-1

[profile work]
region = us-west-2
endpoint_url = http://127.0.0.1:9000
s3 =
  addressing_style = path

[profile sso]
sso_session = corp
region = eu-central-1
";

    #[test]
    fn the_default_profile_gives_keys_and_region() {
        let s = Setup::new(CREDENTIALS, CONFIG).map();
        assert_eq!(s["aws_access_key_id"], "AKDEFAULT");
        assert_eq!(s["aws_secret_access_key"], "sk/with+slash=");
        assert_eq!(s["aws_region"], "eu-west-1");
        assert!(!s.contains_key("aws_endpoint") && !s.contains_key("aws_allow_http"));
    }

    #[test]
    fn a_named_profile_reads_both_files_and_an_http_endpoint_allows_http() {
        let s = Setup::new(CREDENTIALS, CONFIG)
            .with("AWS_PROFILE", "work")
            .map();
        assert_eq!(s["aws_access_key_id"], "AKWORK");
        assert_eq!(s["aws_session_token"], "TOKEN");
        assert_eq!(s["aws_region"], "us-west-2");
        assert_eq!(s["aws_endpoint"], "http://127.0.0.1:9000");
        assert_eq!(s["aws_allow_http"], "true");
    }

    #[test]
    fn the_environment_wins_over_the_profile() {
        let setup = Setup::new(CREDENTIALS, CONFIG)
            .with("AWS_PROFILE", "work")
            .with("AWS_ACCESS_KEY_ID", "AKENV")
            .with("AWS_REGION", "ap-south-1")
            .with("AWS_ENDPOINT_URL", "https://store.example")
            .with("AWS_ALLOW_HTTP", "false");
        assert_eq!(setup.settings().expect("settings"), Vec::new());
        // An http:// endpoint from the environment allows HTTP like the profile's, with or
        // without a profile.
        for credentials in ["", CREDENTIALS] {
            let s = Setup::new(credentials, "")
                .with("AWS_ENDPOINT_URL_S3", "http://localhost:9000")
                .map();
            assert_eq!(s.get("aws_allow_http").map(String::as_str), Some("true"));
            assert!(!s.contains_key("aws_endpoint"), "{s:?}");
        }
    }

    #[test]
    fn files_named_by_the_environment_are_read() {
        let setup = Setup::new("", "");
        let other = setup.dir.path().join("creds");
        std::fs::write(
            &other,
            "[ci]\naws_access_key_id = A\naws_secret_access_key = B\n",
        )
        .expect("write");
        let s = setup
            .with("AWS_SHARED_CREDENTIALS_FILE", &other.display().to_string())
            .with("AWS_PROFILE", "ci")
            .map();
        assert_eq!(
            (
                s["aws_access_key_id"].as_str(),
                s["aws_secret_access_key"].as_str()
            ),
            ("A", "B")
        );
    }

    #[test]
    fn no_files_and_no_profile_add_nothing() {
        let s = s3_settings(&|_| None, false).expect("settings");
        assert!(s.is_empty());
        let setup = Setup::new("", "");
        assert!(setup.settings().expect("settings").is_empty());
    }

    #[test]
    fn an_unknown_profile_is_an_error_naming_it_and_the_files() {
        let setup = Setup::new(CREDENTIALS, CONFIG).with("AWS_PROFILE", "nope");
        let e = setup.settings().expect_err("unknown profile");
        assert!(
            e.contains("AWS_PROFILE=nope")
                && e.contains(".aws/credentials")
                && e.contains(".aws/config"),
            "{e}"
        );
    }

    #[test]
    fn a_profile_with_indirect_credentials_says_how_to_export_them() {
        let setup = Setup::new(CREDENTIALS, CONFIG).with("AWS_PROFILE", "sso");
        let e = setup.settings().expect_err("sso profile");
        assert!(
            e.contains("profile sso")
                && e.contains("sso_session")
                && e.contains("export-credentials"),
            "{e}"
        );
        // With keys in the environment the profile's region still applies.
        let s = Setup::new(CREDENTIALS, CONFIG)
            .with("AWS_PROFILE", "sso")
            .with("AWS_ACCESS_KEY_ID", "AKENV")
            .map();
        assert_eq!(s["aws_region"], "eu-central-1");
        assert!(!s.contains_key("aws_access_key_id"));
        // Likewise with keys of the caller's own (storage_options).
        let setup = Setup::new(CREDENTIALS, CONFIG).with("AWS_PROFILE", "sso");
        let s: HashMap<_, _> = s3_settings(&|k| setup.env.get(k).cloned(), true)
            .expect("settings")
            .into_iter()
            .collect();
        assert_eq!(s["aws_region"], "eu-central-1");
        assert!(!s.contains_key("aws_access_key_id"));
    }
}
