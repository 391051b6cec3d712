//! User code that panics inside the library is a reported failure, never a silently dead task.

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Runs user code (`apply`, a continuation, a hook), turning a panic into its message.
///
/// The state the code left behind may be half-updated, so every caller stops the actor (or
/// fails its recovery) on `Err`: nothing runs on that state afterwards.
pub(crate) fn catch_user<R>(user_code: impl FnOnce() -> R) -> Result<R, String> {
    catch_unwind(AssertUnwindSafe(user_code)).map_err(|payload| panic_message(&*payload))
}

/// The message of a panic (`panic!("...")` gives a `&str` or a `String`).
pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(message) = payload.downcast_ref::<&str>() {
        (*message).to_owned()
    } else if let Some(message) = payload.downcast_ref::<String>() {
        message.clone()
    } else {
        "a panic with a payload that is not a string".to_owned()
    }
}

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
