//! CPU time (getrusage) and a description of the machine.

use std::process::Command;
use std::time::Duration;

fn rusage(who: libc::c_int) -> Duration {
    // SAFETY: getrusage only writes into the zeroed struct we own.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::getrusage(who, &mut usage) };
    if rc != 0 {
        return Duration::ZERO;
    }
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// User + system CPU time of the whole process so far.
pub fn process_cpu() -> Duration {
    rusage(libc::RUSAGE_SELF)
}

/// User + system CPU time of the calling thread so far.
pub fn thread_cpu() -> Duration {
    rusage(libc::RUSAGE_THREAD)
}

/// The 1-minute load average (other work on the machine during a run).
pub fn load_average() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// CPU time (user + system) of process `pid` so far, from `/proc/PID/stat`.
pub fn pid_cpu(pid: i32) -> Option<Duration> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let rest = &text[text.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of stat, i.e. 11 and 12 after the state field (3).
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let ticks = u64::try_from(ticks).ok().filter(|t| *t > 0)?;
    Some(Duration::from_secs_f64(
        (utime + stime) as f64 / ticks as f64,
    ))
}

fn run(cmd: &str, args: &[&str]) -> String {
    Command::new(cmd)
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_else(|e| format!("({cmd} failed: {e})"))
}

/// `nproc`, the first lines of `lscpu`, memory, the rustc version, the kernel and the date.
pub fn machine_description() -> String {
    let lscpu = run("lscpu", &[]);
    let lscpu: Vec<&str> = lscpu.lines().take(16).collect();
    let mem = run("free", &["-h"]);
    format!(
        "date: {}\nnproc: {}\nkernel: {}\nrustc: {}\nmemory:\n{}\nlscpu (head):\n{}\n",
        run("date", &["-u", "+%Y-%m-%dT%H:%M:%SZ"]),
        run("nproc", &[]),
        run("uname", &["-r"]),
        run("rustc", &["--version"]),
        mem,
        lscpu.join("\n"),
    )
}

/// Whether [`set_realtime`] should do anything (set once from the command line).
static REALTIME: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// Asks for `SCHED_FIFO` at `priority` (1-99) for the latency-measuring threads that call
/// [`set_realtime`] afterwards; 0 turns it off.
pub fn enable_realtime(priority: i32) {
    REALTIME.store(priority, std::sync::atomic::Ordering::Relaxed);
}

/// Puts the calling thread in `SCHED_FIFO` at the priority given to [`enable_realtime`], so a
/// busy machine (compilers on both cores) delays its wake-ups less. The threads of the open
/// loops use little CPU, so this cannot starve the machine. Returns whether it took effect
/// (it needs root or `CAP_SYS_NICE`).
pub fn set_realtime() -> bool {
    let priority = REALTIME.load(std::sync::atomic::Ordering::Relaxed);
    if priority <= 0 {
        return false;
    }
    let param = libc::sched_param {
        sched_priority: priority.min(99),
    };
    // SAFETY: pid 0 is the calling thread; `param` is a valid sched_param.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) == 0 }
}
