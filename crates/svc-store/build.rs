//! `sqlx::migrate!` embeds the migration files at build time; on stable Rust
//! it cannot tell Cargo to rebuild when one is added, so this does.

fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
