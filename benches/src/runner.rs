//! Running a benchmark configuration in an Actix system of its own, on a thread of its own,
//! and progress bars.

use std::future::Future;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use actix::Addr;
use actix_persistence_core::journal::{JournalActor, JournalConfig};
use actix_persistence_core::JournalStore;
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Runs `job` in a fresh Actix system on a new thread and returns its output. Every
/// configuration gets its own system, so nothing (actors, timers, pools) leaks between them.
pub fn spawn_system<F, Fut, T>(name: String, job: F) -> std::thread::JoinHandle<T>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = T> + 'static,
    T: Send + 'static,
{
    std::thread::Builder::new()
        .name(name)
        .spawn(move || actix::System::new().block_on(job()))
        .expect("the benchmark thread starts")
}

/// Runs the jobs, all at once (`parallel`) or one after the other, and returns their outputs
/// in job order.
pub fn run_jobs<T: Send + 'static>(
    jobs: Vec<(String, Box<dyn FnOnce() -> T + Send>)>,
    parallel: bool,
) -> Vec<T> {
    let join = |h: std::thread::JoinHandle<T>| h.join().expect("a benchmark thread panicked");
    if parallel {
        let handles: Vec<_> = jobs
            .into_iter()
            .map(|(name, job)| {
                std::thread::Builder::new()
                    .name(name)
                    .spawn(job)
                    .expect("the benchmark thread starts")
            })
            .collect();
        handles.into_iter().map(join).collect()
    } else {
        jobs.into_iter()
            .map(|(name, job)| {
                join(
                    std::thread::Builder::new()
                        .name(name)
                        .spawn(job)
                        .expect("the benchmark thread starts"),
                )
            })
            .collect()
    }
}

/// Runs `fut` in a fresh Actix system on the calling thread.
pub fn block_on_system<Fut: Future>(fut: Fut) -> Fut::Output {
    actix::System::new().block_on(fut)
}

/// Starts a journal actor over `store` with `groups` write-reply-ordering groups and a call
/// timeout of `call_timeout`.
pub fn start_journal(
    store: Arc<dyn JournalStore>,
    groups: usize,
    call_timeout: Duration,
) -> Addr<JournalActor> {
    JournalActor::start_with(store, journal_config(groups, call_timeout))
}

/// The journal settings of the benchmarks: `groups` write-reply-ordering groups (at least 1)
/// and a call timeout of `call_timeout`.
pub fn journal_config(groups: usize, call_timeout: Duration) -> JournalConfig {
    JournalConfig {
        write_reply_ordering_groups: NonZeroUsize::new(groups).unwrap_or(NonZeroUsize::MIN),
        call_timeout,
        ..JournalConfig::default()
    }
}

/// Progress bars of one scenario (drawn on stderr; hidden when it is not a terminal).
#[derive(Clone)]
pub struct Progress {
    multi: MultiProgress,
}

impl Default for Progress {
    fn default() -> Self {
        Self::new()
    }
}

impl Progress {
    /// Progress bars on stderr.
    pub fn new() -> Self {
        Progress {
            multi: MultiProgress::with_draw_target(ProgressDrawTarget::stderr_with_hz(4)),
        }
    }

    /// A bar of `len` steps labelled `label`.
    pub fn bar(&self, label: &str, len: u64) -> ProgressBar {
        let bar = self.multi.add(ProgressBar::new(len));
        bar.set_style(
            ProgressStyle::with_template(
                "{prefix:>28} [{elapsed_precise}] {wide_bar} {pos}/{len} ({per_sec}, eta {eta})",
            )
            .expect("static template")
            .progress_chars("=> "),
        );
        bar.set_prefix(label.to_owned());
        bar
    }

    /// Prints a line above the bars.
    pub fn println(&self, line: impl AsRef<str>) {
        if self.multi.is_hidden() {
            eprintln!("{}", line.as_ref());
        } else {
            let _ = self.multi.println(line);
        }
    }
}
