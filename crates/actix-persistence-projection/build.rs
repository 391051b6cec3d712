//! Sets `cfg(has_database_url)` when `DATABASE_URL` names a PostgreSQL server: the PostgreSQL
//! tests run only then, and show as ignored otherwise, so the counts `cargo test` prints are
//! honest (`.ci/run` sets it and refuses to run without it).

fn main() {
    println!("cargo:rerun-if-env-changed=DATABASE_URL");
    println!("cargo:rustc-check-cfg=cfg(has_database_url)");
    if std::env::var("DATABASE_URL").is_ok_and(|url| !url.trim().is_empty()) {
        println!("cargo:rustc-cfg=has_database_url");
    }
}
