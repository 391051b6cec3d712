//! Sets `cfg(has_database_url)` when `DATABASE_URL` names a PostgreSQL server: the PostgreSQL
//! tests are compiled (or run) only then, and are counted as ignored otherwise, so the counts
//! `cargo test` prints are honest.

fn main() {
    println!("cargo:rerun-if-env-changed=DATABASE_URL");
    println!("cargo:rustc-check-cfg=cfg(has_database_url)");
    if std::env::var("DATABASE_URL").is_ok_and(|url| !url.trim().is_empty()) {
        println!("cargo:rustc-cfg=has_database_url");
    }
}
