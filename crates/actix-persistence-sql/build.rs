//! Rebuilds the crate when a migration changes: `sqlx::migrate!` embeds the files at compile
//! time, and cargo does not otherwise know it reads them.
//!
//! Sets `cfg(has_database_url)` when `DATABASE_URL` names a PostgreSQL server: the PostgreSQL
//! tests are compiled only then, and show as one ignored test per test binary otherwise, so
//! the counts `cargo test` prints are honest.

fn main() {
    println!("cargo:rerun-if-changed=migrations");
    println!("cargo:rerun-if-env-changed=DATABASE_URL");
    println!("cargo:rustc-check-cfg=cfg(has_database_url)");
    if std::env::var("DATABASE_URL").is_ok_and(|url| !url.trim().is_empty()) {
        println!("cargo:rustc-cfg=has_database_url");
    }
}
