//! User code that panics inside the library is a reported failure, never a silently dead task.

use std::panic::{catch_unwind, AssertUnwindSafe};

/// Runs user code (`apply`, a continuation, a hook), turning a panic into its message.
///
/// The state the code left behind may be half-updated, so every caller stops the actor (or
/// fails its recovery) on `Err`: nothing runs on that state afterwards.
pub(crate) fn catch_user<R>(user_code: impl FnOnce() -> R) -> Result<R, String> {
    catch_unwind(AssertUnwindSafe(user_code)).map_err(|payload| panic_message(&*payload))
}

pub(crate) use crate::error::panic_message;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_its_message() {
        assert_eq!(
            catch_user(|| panic!("boom")),
            Err::<(), _>("boom".to_owned())
        );
        let n = 3;
        assert_eq!(
            catch_user(|| panic!("boom {n}")),
            Err::<(), _>("boom 3".to_owned())
        );
        assert_eq!(catch_user(|| 7), Ok(7));
    }
}
