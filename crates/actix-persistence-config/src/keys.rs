//! The table of known settings: dotted keys, their kinds, sections, env var names and typo hints.

/// Prefix of the environment variables that set individual settings.
pub const ENV_PREFIX: &str = "ACTIX_PERSISTENCE__";

/// Environment variable naming a user TOML file, read when the loader uses the process env
/// (or when it appears among the variables given to [`SettingsLoader::env_vars`]).
///
/// [`SettingsLoader::env_vars`]: crate::SettingsLoader::env_vars
pub const CONFIG_FILE_ENV: &str = "ACTIX_PERSISTENCE_CONFIG";

/// Environment variable holding the PostgreSQL URL used when `journal.postgres.url` is empty,
/// read from the process environment or from the variables given to
/// [`SettingsLoader::env_vars`].
///
/// [`SettingsLoader::env_vars`]: crate::SettingsLoader::env_vars
pub const DATABASE_URL_ENV: &str = "DATABASE_URL";

/// What kind of value a setting holds, and so which rule it follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// One of [`crate::JournalPlugin`]'s names.
    Plugin,
    /// One of [`crate::SnapshotStorePlugin`]'s names.
    SnapshotPlugin,
    /// An integer `>= 1` and `<= max`.
    Count { max: u128 },
    /// A humantime duration `> 0`.
    Duration,
    /// A non-empty string.
    NonEmptyString,
    /// Any string, the empty one included.
    String,
}

impl Kind {
    /// The rule a value of this kind must follow, as shown in a problem.
    pub(crate) fn rule(self) -> String {
        match self {
            Kind::Plugin => format!(
                "must be one of {}",
                crate::JournalPlugin::ALL
                    .iter()
                    .map(|p| format!("\"{}\"", p.as_str()))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Kind::SnapshotPlugin => format!(
                "must be one of \"{}\", {}",
                crate::SAME_AS_JOURNAL,
                crate::SnapshotStorePlugin::ALL
                    .iter()
                    .map(|p| format!("\"{}\"", p.as_str()))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Kind::Count { .. } => "must be an integer >= 1".to_owned(),
            Kind::Duration => {
                "must be a duration > 0, written as a string such as \"10s\" or \"500ms\""
                    .to_owned()
            }
            Kind::NonEmptyString => "must be a non-empty string".to_owned(),
            Kind::String => "must be a string".to_owned(),
        }
    }
}

/// One known setting.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Key {
    /// Dotted, kebab-case path: `journal.write-reply-ordering-groups`.
    pub(crate) path: &'static str,
    pub(crate) kind: Kind,
}

pub(crate) const GROUPS: &str = "journal.write-reply-ordering-groups";
pub(crate) const MAX_GROUPS: &str = "journal.max-write-reply-ordering-groups";
pub(crate) const POSTGRES_URL: &str = "journal.postgres.url";
pub(crate) const READ_AHEAD_PAGES: &str = "query.read-ahead-pages";
/// The most `journal.max-write-reply-ordering-groups` (and so
/// `journal.write-reply-ordering-groups`) can be: each group is a resequencer actor started with
/// the journal ([`crate::MAX_WRITE_REPLY_ORDERING_GROUPS`]).
pub(crate) const MAX_GROUPS_CEILING: u128 = crate::MAX_WRITE_REPLY_ORDERING_GROUPS as u128;
/// The most `journal.sqlite.max-connections` and `journal.postgres.max-connections` can be
/// ([`crate::MAX_POOL_CONNECTIONS`]).
pub(crate) const MAX_CONNECTIONS_CEILING: u128 = crate::MAX_POOL_CONNECTIONS as u128;
/// The most `query.read-ahead-pages` can be ([`crate::MAX_READ_AHEAD_PAGES`]).
pub(crate) const MAX_READ_AHEAD_PAGES: u128 = crate::MAX_READ_AHEAD_PAGES as u128;

/// The rule a group count above its limit breaks (`limit` from `source`).
pub(crate) fn groups_above_limit_rule(
    limit: impl std::fmt::Display,
    source: &crate::error::ConfigSource,
) -> String {
    format!("must be <= {MAX_GROUPS} ({limit} from {source}); raise the limit to use more groups")
}

/// The rule of a count setting: an integer from 1 to `max`.
pub(crate) fn count_rule(max: u128) -> String {
    format!("must be an integer >= 1 and <= {max}")
}

const USIZE_MAX: u128 = usize::MAX as u128;
const U32_MAX: u128 = u32::MAX as u128;

/// Every leaf setting, in the order of reference.toml.
pub(crate) const KEYS: &[Key] = &[
    Key {
        path: "journal.plugin",
        kind: Kind::Plugin,
    },
    Key {
        path: GROUPS,
        kind: Kind::Count {
            max: MAX_GROUPS_CEILING,
        },
    },
    Key {
        path: MAX_GROUPS,
        kind: Kind::Count {
            max: MAX_GROUPS_CEILING,
        },
    },
    Key {
        path: "journal.replay-batch-size",
        kind: Kind::Count { max: USIZE_MAX },
    },
    Key {
        path: "journal.max-batch-size",
        kind: Kind::Count { max: U32_MAX },
    },
    Key {
        path: "journal.max-concurrent-recoveries",
        kind: Kind::Count { max: USIZE_MAX },
    },
    Key {
        path: "journal.recovery-timeout",
        kind: Kind::Duration,
    },
    Key {
        path: "journal.circuit-breaker.max-failures",
        kind: Kind::Count { max: U32_MAX },
    },
    Key {
        path: "journal.circuit-breaker.call-timeout",
        kind: Kind::Duration,
    },
    Key {
        path: "journal.circuit-breaker.reset-timeout",
        kind: Kind::Duration,
    },
    Key {
        path: "journal.sqlite.url",
        kind: Kind::NonEmptyString,
    },
    Key {
        path: "journal.sqlite.max-connections",
        kind: Kind::Count {
            max: MAX_CONNECTIONS_CEILING,
        },
    },
    Key {
        path: "journal.sqlite.busy-timeout",
        kind: Kind::Duration,
    },
    Key {
        path: POSTGRES_URL,
        kind: Kind::String,
    },
    Key {
        path: "journal.postgres.max-connections",
        kind: Kind::Count {
            max: MAX_CONNECTIONS_CEILING,
        },
    },
    Key {
        path: "journal.postgres.acquire-timeout",
        kind: Kind::Duration,
    },
    Key {
        path: "journal.postgres.statement-timeout",
        kind: Kind::Duration,
    },
    Key {
        path: "journal.postgres.schema",
        kind: Kind::String,
    },
    Key {
        path: "snapshot-store.plugin",
        kind: Kind::SnapshotPlugin,
    },
    Key {
        path: "snapshot-store.call-timeout",
        kind: Kind::Duration,
    },
    Key {
        path: "query.refresh-interval",
        kind: Kind::Duration,
    },
    Key {
        path: "query.late-commit-window",
        kind: Kind::Duration,
    },
    Key {
        path: "query.page-size",
        kind: Kind::Count { max: U32_MAX },
    },
    Key {
        path: READ_AHEAD_PAGES,
        kind: Kind::Count {
            max: MAX_READ_AHEAD_PAGES,
        },
    },
];

/// Every section (a TOML table holding settings).
pub(crate) const SECTIONS: &[&str] = &[
    "journal",
    "journal.circuit-breaker",
    "journal.sqlite",
    "journal.postgres",
    "snapshot-store",
    "query",
];

pub(crate) fn key(path: &str) -> Option<&'static Key> {
    KEYS.iter().find(|k| k.path == path)
}

pub(crate) fn is_section(path: &str) -> bool {
    SECTIONS.contains(&path)
}

/// Every known setting as a dotted, kebab-case key, in the order of `reference.toml`.
///
/// # Examples
///
/// ```
/// let keys: Vec<_> = actix_persistence_config::keys().collect();
/// assert!(keys.contains(&"journal.write-reply-ordering-groups"));
/// assert!(keys.contains(&"journal.circuit-breaker.call-timeout"));
/// ```
pub fn keys() -> impl ExactSizeIterator<Item = &'static str> {
    KEYS.iter().map(|k| k.path)
}

/// The environment variable that sets the known setting `key`, or `None` for an unknown key.
///
/// # Examples
///
/// ```
/// use actix_persistence_config::env_var;
///
/// assert_eq!(
///     env_var("journal.circuit-breaker.call-timeout").as_deref(),
///     Some("ACTIX_PERSISTENCE__JOURNAL__CIRCUIT_BREAKER__CALL_TIMEOUT"),
/// );
/// assert_eq!(env_var("journal.no-such-key"), None);
/// ```
pub fn env_var(key: &str) -> Option<String> {
    if self::key(key).is_some() {
        Some(env_var_unchecked(key))
    } else {
        None
    }
}

pub(crate) fn env_var_unchecked(path: &str) -> String {
    let mut name = String::from(ENV_PREFIX);
    let segments: Vec<String> = path
        .split('.')
        .map(|s| s.replace('-', "_").to_ascii_uppercase())
        .collect();
    name.push_str(&segments.join("__"));
    name
}

/// Maps an environment variable name to a dotted key, if it carries the settings prefix
/// (case-insensitive). The key may be unknown.
pub(crate) fn key_of_env_var(name: &str) -> Option<String> {
    let prefix = name.get(..ENV_PREFIX.len())?;
    if !prefix.eq_ignore_ascii_case(ENV_PREFIX) {
        return None;
    }
    let rest = name.get(ENV_PREFIX.len()..)?;
    Some(
        rest.split("__")
            .map(|s| s.to_ascii_lowercase().replace('_', "-"))
            .collect::<Vec<_>>()
            .join("."),
    )
}

/// What every variable of ours starts with.
const ENV_STEM: &str = "ACTIX_PERSISTENCE";

/// [`ENV_STEM`] without its underscore, as [`letters`] compares names.
const STEM_LETTERS: &str = "ACTIXPERSISTENCE";

/// Whether `name` starts with `ACTIX_PERSISTENCE` (case-insensitive): ours, whether or not it
/// follows the scheme.
pub(crate) fn has_env_prefix(name: &str) -> bool {
    name.get(..ENV_STEM.len())
        .is_some_and(|start| start.eq_ignore_ascii_case(ENV_STEM))
}

/// Whether `name` is meant to be one of ours: it starts with `ACTIX_PERSISTENCE`, or with a
/// misspelling of it (`ACTIX_PERSISTANCE__JOURNAL__PLUGIN`) followed by more.
pub(crate) fn looks_like_ours(name: &str) -> bool {
    letters_after_stem(name).is_some()
}

/// Letters a misspelt stem must be followed by: the shortest section, `QUERY`, has 5.
const MIN_LETTERS_AFTER_STEM: usize = 4;

/// `name` uppercased, without underscores: the letters that say which setting it means,
/// whichever underscores it was written with.
fn letters(name: &str) -> Vec<char> {
    name.chars()
        .filter(|c| *c != '_')
        .map(|c| c.to_ascii_uppercase())
        .collect()
}

/// The letters of `name` after its stem, `ACTIX_PERSISTENCE` or a misspelling of it (at most
/// two letters added, missing, changed or swapped); `None` when `name` does not start like one
/// of ours. A misspelt stem counts only with a few letters after it (a section or `CONFIG`),
/// so a lone `ACTIX_PERSISTENC` is not taken for one of ours.
fn letters_after_stem(name: &str) -> Option<String> {
    let letters = letters(name);
    let stem = STEM_LETTERS.len();
    if has_env_prefix(name) {
        return Some(letters.get(stem..).unwrap_or_default().iter().collect());
    }
    (stem - 2..=stem + 2)
        .filter(|&end| end + MIN_LETTERS_AFTER_STEM <= letters.len())
        .map(|end| {
            let start: String = letters[..end].iter().collect();
            (end, strsim::damerau_levenshtein(&start, STEM_LETTERS))
        })
        .filter(|&(_, distance)| distance <= 2)
        .min_by_key(|&(end, distance)| (distance, end.abs_diff(stem)))
        .map(|(end, _)| letters[end..].iter().collect())
}

/// The correct variable closest to `name`, a variable that follows no scheme: the same letters
/// with other underscores (`ACTIX_PERSISTENCE_JOURNAL_PLUGIN`) first, else a likely typo.
pub(crate) fn closest_env_var(name: &str) -> Option<String> {
    // Compared without the shared stem, which would make every name look alike.
    let wanted = letters_after_stem(name)?;
    if let Some(hit) = same_letters_env_var(name) {
        return Some(hit);
    }
    env_var_candidates()
        .map(|c| {
            let score = strsim::normalized_damerau_levenshtein(
                &letters_after_stem(&c).unwrap_or_default(),
                &wanted,
            );
            (c, score)
        })
        .filter(|(_, score)| *score >= 0.6)
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(c, _)| c)
}

/// The correct variable with the same letters as `name` after the stem, only the underscores
/// (or the stem's spelling) differing: `ACTIX_PERSISTENCE__JOURNAL_PLUGIN` means
/// `ACTIX_PERSISTENCE__JOURNAL__PLUGIN`.
pub(crate) fn same_letters_env_var(name: &str) -> Option<String> {
    let wanted = letters_after_stem(name)?;
    env_var_candidates().find(|c| letters_after_stem(c).as_deref() == Some(wanted.as_str()))
}

/// Every correct variable: one per setting, and the user file's.
fn env_var_candidates() -> impl Iterator<Item = String> {
    KEYS.iter()
        .map(|k| env_var_unchecked(k.path))
        .chain([CONFIG_FILE_ENV.to_owned()])
}

fn parent(path: &str) -> &str {
    path.rsplit_once('.').map_or("", |(p, _)| p)
}

fn last(path: &str) -> &str {
    path.rsplit_once('.').map_or(path, |(_, l)| l)
}

fn known_paths() -> impl Iterator<Item = &'static str> {
    SECTIONS.iter().copied().chain(KEYS.iter().map(|k| k.path))
}

/// The known key closest to the unknown `path`, if one is close enough to be a likely typo.
pub(crate) fn closest(path: &str) -> Option<&'static str> {
    let score = |a: &str, b: &str| strsim::normalized_damerau_levenshtein(a, b);
    let best = |candidates: Vec<&'static str>, f: &dyn Fn(&str) -> f64, min: f64| {
        candidates
            .into_iter()
            .map(|c| (c, f(c)))
            .filter(|(_, s)| *s >= min)
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(c, _)| c)
    };
    // The right key in the wrong (or misspelt) section: the closest such path.
    let same_name: Vec<_> = known_paths().filter(|k| last(k) == last(path)).collect();
    if let Some(hit) = best(same_name, &|c| score(c, path), 0.0) {
        return Some(hit);
    }
    // A misspelt key in the right section.
    let siblings: Vec<_> = known_paths()
        .filter(|k| parent(k) == parent(path))
        .collect();
    if let Some(hit) = best(siblings, &|c| score(last(c), last(path)), 0.5) {
        return Some(hit);
    }
    // A misspelt section.
    best(known_paths().collect(), &|c| score(c, path), 0.8)
}

/// The rule of a problem for the variable `name` of the scheme that maps to the unknown key
/// `path`: the correct variable with the same letters first (one underscore where two belong,
/// `ACTIX_PERSISTENCE__JOURNAL_PLUGIN`), else the closest key.
pub(crate) fn unknown_env_rule(name: &str, path: &str) -> String {
    let same = same_letters_env_var(name)
        .filter(|var| var.as_str() != CONFIG_FILE_ENV)
        .and_then(|var| Some((key_of_env_var(&var)?, var)));
    match same {
        Some((key, var)) => format!("is not a known setting; did you mean {key} ({var})?"),
        None => unknown_rule(path, true),
    }
}

/// The rule of a problem for the unknown key `path`; `env` adds the env var of the hint.
pub(crate) fn unknown_rule(path: &str, env: bool) -> String {
    match closest(path) {
        Some(hit) if env && key(hit).is_some() => format!(
            "is not a known setting; did you mean {hit} ({})?",
            env_var_unchecked(hit)
        ),
        Some(hit) => format!("is not a known setting; did you mean {hit}?"),
        None => {
            let section = parent(path);
            let siblings: Vec<_> = known_paths()
                .filter(|k| parent(k) == section)
                .map(last)
                .collect();
            if siblings.is_empty() {
                "is not a known setting".to_owned()
            } else if section.is_empty() {
                format!(
                    "is not a known setting; the known top-level keys are: {}",
                    siblings.join(", ")
                )
            } else {
                format!(
                    "is not a known setting; the known keys of [{section}] are: {}",
                    siblings.join(", ")
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_var_name_round_trips_to_key_for_every_key() {
        for k in KEYS {
            assert_eq!(
                key_of_env_var(&env_var_unchecked(k.path)).as_deref(),
                Some(k.path)
            );
        }
    }

    #[test]
    fn prefix_check_does_not_split_multibyte_names() {
        assert_eq!(key_of_env_var("ACTIX_PERSISTENCÉ__JOURNAL__PLUGIN"), None);
        assert_eq!(key_of_env_var("é"), None);
    }

    #[test]
    fn typo_in_section_is_hinted() {
        assert_eq!(closest("jornal.plugin"), Some("journal.plugin"));
        assert_eq!(
            closest("journal.busy-timeout"),
            Some("journal.sqlite.busy-timeout")
        );
        assert_eq!(
            closest("snapshot-stor.plugin"),
            Some("snapshot-store.plugin")
        );
        assert_eq!(closest("journal.zzzzzzzz"), None);
    }
}
