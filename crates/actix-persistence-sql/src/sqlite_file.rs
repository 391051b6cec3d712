//! The file of a SQLite journal, checked before each commit: SQLite goes on writing to a file
//! deleted while it is open (the unlinked inode), so every write acknowledged after the
//! deletion would be gone at the next start, when a new, empty database is made at the path.

use std::io;
use std::path::{Path, PathBuf};

use actix_persistence_core::JournalError;

/// The database file a journal's writer connection has open.
#[derive(Debug, Clone)]
pub(crate) struct DatabaseFile {
    path: PathBuf,
}

impl DatabaseFile {
    /// The file at `filename` (as sqlx's options name it, made absolute), or `None` when the
    /// database is not a file there: `:memory:`, a `file:` URI, or nothing at the path.
    pub(crate) fn at(filename: &Path) -> Option<Self> {
        let name = filename.to_str()?;
        if name.is_empty() || name == ":memory:" || name.starts_with("file:") {
            return None;
        }
        filename.is_file().then(|| DatabaseFile {
            path: filename.to_owned(),
        })
    }

    /// Checks that the file is still at its path.
    ///
    /// # Errors
    /// [`JournalError::Storage`] when nothing is at the path any more: the file was deleted
    /// (or moved) while open. Any other answer of the file system (a permission denied on the
    /// directory, say) passes: the check must never fail a write of a file that is there.
    pub(crate) fn check_present(&self) -> Result<(), JournalError> {
        match std::fs::symlink_metadata(&self.path) {
            Err(error) if error.kind() == io::ErrorKind::NotFound => Err(JournalError::storage(
                "write",
                io::Error::new(
                    io::ErrorKind::NotFound,
                    format!(
                        "the SQLite database file {} was deleted or moved while the journal had \
                         it open: nothing of this write was stored (SQLite would write to the \
                         deleted file, lost at the next start); put the file back or restart \
                         the journal",
                        self.path.display()
                    ),
                ),
            )),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deleted_file_fails_the_check_and_only_a_plain_file_is_watched() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("journal.db");
        assert!(DatabaseFile::at(&path).is_none(), "nothing there yet");
        std::fs::write(&path, b"").expect("create");
        let file = DatabaseFile::at(&path).expect("a plain file");
        assert!(file.check_present().is_ok());
        std::fs::remove_file(&path).expect("delete");
        let error = file.check_present().expect_err("deleted");
        assert!(
            error.to_string().contains("was deleted or moved"),
            "{error}"
        );
        assert!(DatabaseFile::at(Path::new(":memory:")).is_none());
        assert!(DatabaseFile::at(Path::new("file:memdb?mode=memory")).is_none());
    }
}
