//! The main job, as a user runs it: `examples/quickstart.rs` in an empty folder, twice, and
//! with a bad setting. `cargo test` builds the example next to this test's binary.

use std::path::PathBuf;
use std::process::{Command, Output};

fn quickstart() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps/<test>");
    let path = profile_dir
        .join("examples")
        .join(format!("quickstart{}", std::env::consts::EXE_SUFFIX));
    assert!(
        path.exists(),
        "cargo test builds examples; missing {}",
        path.display()
    );
    path
}

fn run_in(dir: &std::path::Path, env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(quickstart());
    command
        .current_dir(dir)
        .env_remove("ACTIX_PERSISTENCE_CONFIG");
    for (key, _) in std::env::vars() {
        if key.starts_with("ACTIX_PERSISTENCE__") {
            command.env_remove(key);
        }
    }
    command.envs(env.iter().copied());
    command.output().expect("run the quickstart")
}

/// The line before the last: the read model's agreement with the actors.
fn read_model_line(output: &Output) -> String {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    lines
        .len()
        .checked_sub(2)
        .map(|i| lines[i].to_owned())
        .unwrap_or_default()
}

fn last_line(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .last()
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn second_run_recovers_exactly_what_the_first_persisted() {
    let dir = tempfile::tempdir().expect("temp dir");
    let first = run_in(dir.path(), &[]);
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let line = last_line(&first);
    assert!(
        line.starts_with("quickstart: recovered 0 events, persisted "),
        "{line}"
    );
    assert!(line.ends_with(", 5 accounts"), "{line}");
    let persisted: u64 = line
        .split("persisted ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .expect("a count of persisted events");
    assert!(persisted > 0);
    assert_eq!(
        read_model_line(&first),
        "quickstart: read model agrees for 5 accounts"
    );
    assert!(
        dir.path().join("actix-persistence.db").exists(),
        "the default SQLite file"
    );

    let second = run_in(dir.path(), &[]);
    assert!(
        second.status.success(),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    let line = last_line(&second);
    assert!(
        line.starts_with(&format!("quickstart: recovered {persisted} events, ")),
        "{line}"
    );
    // Balances printed after recovery in the second run equal those at the end of the first.
    let ends: Vec<String> = String::from_utf8_lossy(&first.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("end: ").map(str::to_owned))
        .collect();
    let recovered: Vec<String> = String::from_utf8_lossy(&second.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("recovered: ").map(str::to_owned))
        .collect();
    assert_eq!(ends.len(), 5);
    assert_eq!(ends, recovered);
    assert_eq!(
        read_model_line(&second),
        "quickstart: read model agrees for 5 accounts"
    );
}

#[test]
fn a_bad_groups_setting_makes_the_quickstart_exit_with_the_config_error() {
    let var = "ACTIX_PERSISTENCE__JOURNAL__WRITE_REPLY_ORDERING_GROUPS";
    for value in ["0", "four"] {
        let dir = tempfile::tempdir().expect("temp dir");
        let output = run_in(dir.path(), &[(var, value)]);
        assert!(!output.status.success(), "{value} must fail");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains("journal.write-reply-ordering-groups"),
            "{stderr}"
        );
        assert!(stderr.contains(&format!("\"{value}\"")), "{stderr}");
        assert!(stderr.contains(var), "{stderr}");
        assert!(
            !dir.path().join("actix-persistence.db").exists(),
            "no store was opened"
        );
    }
}
