//! The conformance macros. The list of cases lives once, in `__journal_cases!` and
//! `__snapshot_cases!`: both the `CASES` tables and the test-generating macros are expanded
//! from it, so a case can never be in one and missing from the other.

/// Expands into one `#[test]` per journal conformance case (J1-J30 as `j01_replay_all` ..
/// `j29_a_deleted_sequence_number_is_not_written_again`, the fencing cases F1-F5 as
/// `f01_ownership_raises_the_epoch` .. `f05_older_token_deletes_nothing`, and the model check as `journal_agrees_with_model`), each
/// running in an Actix system of its own against a store fresh from the factory.
///
/// The factory is an expression callable with no argument that returns a future of the store:
/// a closure `|| async { ... }` or the name of an `async fn`. The store is any
/// [`JournalStore`](actix_persistence_core::JournalStore), including an
/// `Arc<dyn JournalStore>`. Attributes before the factory (e.g. `#[ignore = "..."]`) are put
/// on every generated test. Call it once per store, inside a module of its own.
///
/// With `optional:` before it, the factory returns an `Option` of the store, and `None` skips
/// each case with a notice (for a database that is not configured on every machine).
///
/// # Examples
/// ```
/// mod in_memory {
///     actix_persistence_testkit::journal_conformance_tests!(|| async {
///         actix_persistence_core::InMemoryJournal::new()
///     });
/// }
///
/// mod needs_a_database {
///     async fn connect() -> actix_persistence_core::InMemoryJournal {
///         actix_persistence_core::InMemoryJournal::new()
///     }
///     actix_persistence_testkit::journal_conformance_tests!(
///         #[ignore = "needs a database"]
///         connect
///     );
/// }
///
/// mod only_where_configured {
///     async fn connect() -> Option<actix_persistence_core::InMemoryJournal> {
///         std::env::var("MY_JOURNAL_URL")
///             .ok()
///             .map(|_url| actix_persistence_core::InMemoryJournal::new())
///     }
///     actix_persistence_testkit::journal_conformance_tests!(optional: connect);
/// }
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! journal_conformance_tests {
    ($($input:tt)*) => {
        $crate::__conformance_macro! { __journal_cases, journal, [] $($input)* }
    };
}

/// Expands into one `#[test]` per snapshot store conformance case (S1-S14 as
/// `s01_load_unknown_id` .. `s14_read_metadata_lists_the_newest`), each against a store
/// fresh from the factory. Same shape as
/// [`journal_conformance_tests!`](crate::journal_conformance_tests).
///
/// # Examples
/// ```
/// mod in_memory_snapshots {
///     actix_persistence_testkit::snapshot_store_conformance_tests!(|| async {
///         actix_persistence_core::InMemorySnapshotStore::new()
///     });
/// }
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! snapshot_store_conformance_tests {
    ($($input:tt)*) => {
        $crate::__conformance_macro! { __snapshot_cases, snapshot, [] $($input)* }
    };
}

/// The body of both conformance macros: collects the attributes before the factory, then
/// expands `$cases` (`__journal_cases` or `__snapshot_cases`) into one test per case, run by
/// `run_case` (or `run_case_if_available` after `optional:`) of `conformance::$module`.
#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_macro {
    ($cases:ident, $module:ident, [$($attrs:tt)*] #[$attr:meta] $($rest:tt)*) => {
        $crate::__conformance_macro! { $cases, $module, [$($attrs)* #[$attr]] $($rest)* }
    };
    ($cases:ident, $module:ident, [$($attrs:tt)*] optional: $factory:expr $(,)?) => {
        $crate::$cases! {
            __conformance_tests {
                $crate::conformance::$module::run_case_if_available, [$($attrs)*], $factory
            }
        }
    };
    ($cases:ident, $module:ident, [$($attrs:tt)*] $factory:expr $(,)?) => {
        $crate::$cases! {
            __conformance_tests {
                $crate::conformance::$module::run_case, [$($attrs)*], $factory
            }
        }
    };
}

/// One test per case: `run_case(name, factory)`.
#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_tests {
    ({ $runner:path, $attrs:tt, $factory:expr } $($name:ident: $rule:literal,)*) => {
        $(
            $crate::__conformance_test! { $attrs, $runner, $factory, $name, $rule }
        )*
    };
}

/// One test: `run_case(name, factory)` with the caller's attributes.
#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_test {
    ([$($attr:tt)*], $runner:path, $factory:expr, $name:ident, $rule:literal) => {
        $($attr)*
        #[doc = $rule]
        #[test]
        fn $name() {
            $runner(::core::stringify!($name), $factory);
        }
    };
}

/// Calls `$crate::$callback! { { args } name: "rule", ... }` with every journal case.
#[doc(hidden)]
#[macro_export]
macro_rules! __journal_cases {
    ($callback:ident { $($args:tt)* }) => {
        $crate::$callback! {
            { $($args)* }
            j01_replay_all: "J1 replay(1, MAX, MAX) gives 1..5, highest 5",
            j02_replay_from_lower_bound: "J2 replay(3, MAX, MAX) gives 3..5, highest 5",
            j03_replay_to_upper_bound: "J3 replay(1, 3, MAX) gives 1..3, highest 5",
            j04_replay_with_max: "J4 replay(1, MAX, 3) gives 1..3, highest 5",
            j05_replay_between_bounds: "J5 replay(2, 3, MAX) gives 2..3, highest 5",
            j06_replay_between_bounds_with_max: "J6 replay(2, 5, 2) gives 2..3, highest 5",
            j07_replay_single_event: "J7 replay(2, 2, MAX) gives 2, highest 5",
            j08_replay_max_one: "J8 replay(2, 4, 1) gives 2, highest 5",
            j09_replay_max_zero: "J9 replay(2, 4, 0) gives nothing, highest 5",
            j10_replay_empty_range: "J10 replay(3, 2, MAX) gives nothing, highest 5",
            j11_replay_unknown_id: "J11 an id that never wrote replays nothing, highest 0",
            j12_read_highest_without_replay: "J12 the highest sequence number reads 5",
            j13_delete_then_replay: "J13 delete up to 3, then replay(1, MAX, MAX) gives 4, 5, highest 5",
            j14_delete_keeps_highest: "J14 a delete never lowers the highest sequence number",
            j15_delete_all: "J15 delete up to MAX, then a replay gives nothing, highest 5",
            j16_delete_then_replay_from_deleted: "J16 delete up to 3, then replay(3, MAX, MAX) gives 4, 5",
            j17_delete_then_replay_deleted_range: "J17 delete up to 3, then replay(1, 2, MAX) gives nothing",
            j18_delete_then_replay_up_to_deleted: "J18 delete up to 3, then replay(1, 3, MAX) gives nothing",
            j19_delete_then_replay_after_deleted: "J19 delete up to 3, then replay(4, MAX, MAX) gives 4, 5",
            j20_delete_then_replay_across_deleted: "J20 delete up to 3, then replay(1, 4, MAX) gives 4",
            j21_unserializable_event_is_rejected: "J21 an unserializable event is rejected; the events around it are stored",
            j22_one_result_per_atomic_write: "J22 one result per atomic write of 1, 2, 3 and 10 events",
            j23_failed_atomic_write_stores_nothing: "J23 an atomic write failing on its 2nd event stores nothing",
            j24_second_writer_fails: "J24 a second writer of a stored sequence number fails, never overwrites",
            j25_persistence_ids_are_byte_exact: "J25 persistence ids are compared byte for byte",
            j26_metadata_round_trip: "J26 metadata survives write and replay unchanged",
            j27_store_rejects_writes_over_the_limits: "J27 the store rejects writes over the limits, each alone; the rest of the batch is stored",
            j28_no_write_of_an_id_after_its_failed_one: "J28 no later write of an id in a batch is stored after its failed one",
            j29_a_deleted_sequence_number_is_not_written_again: "J29 a deleted sequence number is not written again; the rest of the batch and the next number are",
            j30_replay_bounds_agree_with_their_reads: "J30 read_replay_bounds answers what read_highest_sequence_nr and read_deleted_to answer",
            f01_ownership_raises_the_epoch: "F1 taking ownership raises the owner epoch and reads the highest sequence number",
            f02_older_token_is_fenced_and_stores_nothing: "F2 a write with an older fencing token fails with Fenced and stores nothing",
            f03_write_before_takeover_is_replayed: "F3 a write committed before a takeover is replayed by the new owner; later ones are fenced",
            f04_fenced_write_fails_alone_in_a_batch: "F4 a fenced write fails alone; the rest of its batch is stored",
            f05_older_token_deletes_nothing: "F5 a delete with an older fencing token fails with Fenced and deletes nothing",
            journal_agrees_with_model: "The journal agrees with a simple model on generated operations",
        }
    };
}

/// Calls `$crate::$callback! { { args } name: "rule", ... }` with every snapshot case.
#[doc(hidden)]
#[macro_export]
macro_rules! __snapshot_cases {
    ($callback:ident { $($args:tt)* }) => {
        $crate::$callback! {
            { $($args)* }
            s01_load_unknown_id: "S1 an id with no snapshots loads none",
            s02_load_max_timestamp_too_early: "S2 max timestamp 100 loads none",
            s03_load_max_seq_too_low: "S3 max seq 7 loads none",
            s04_load_latest: "S4 latest loads s-5 with m5",
            s05_load_max_seq: "S5 max seq 13 loads s-3",
            s06_load_max_seq_and_timestamp: "S6 max seq 13 and m3's timestamp load s-3",
            s07_delete_one: "S7 after deleting the snapshot at seq 13, max seq 13 loads s-2",
            s08_delete_matching: "S8 delete matching (13, m3) leaves none there, and s-4 at (14, m4)",
            s09_delete_matching_spares_later_timestamp: "S9 delete matching (14, m4's timestamp - 1) keeps s-4",
            s10_save_again_replaces: "S10 saving again at seq 15 replaces s-5",
            s11_large_snapshots_round_trip: "S11 10,000-byte and 50 MiB snapshots round-trip byte-exact",
            s12_unserializable_snapshot_is_an_error: "S12 an unserializable state is an error; nothing is saved",
            s13_unstorable_snapshot_is_refused: "S13 a NUL in the manifest, a seq_nr above i64::MAX or a payload over MAX_SNAPSHOT_BYTES is refused; nothing is saved",
            s14_read_metadata_lists_the_newest: "S14 read_metadata lists the newest matching snapshots' metadata, newest first, at most the limit, as load sees them",
        }
    };
}

/// The `CASES` table of a case module, from the case list.
#[doc(hidden)]
#[macro_export]
macro_rules! __case_table {
    ({ $case:ident, $doc:literal } $($name:ident: $rule:literal,)*) => {
        #[doc = $doc]
        pub static CASES: &[$case] = &[
            $($case {
                name: ::core::stringify!($name),
                rule: $rule,
                run: |store| ::std::boxed::Box::pin($name(store)),
            },)*
        ];
    };
}

/// Expands into one `#[test]` per query conformance case (Q1-Q23 as
/// `q01_events_by_persistence_id_bounds` ..
/// `q16_payloads_of_every_size_come_back_byte_for_byte`), each against a
/// [`QueryStore`](actix_persistence_core::query::QueryStore) fresh from the factory. Same
/// shape as [`journal_conformance_tests!`](crate::journal_conformance_tests).
///
/// # Examples
/// ```
/// mod in_memory_queries {
///     actix_persistence_testkit::query_conformance_tests!(|| async {
///         actix_persistence_core::InMemoryJournal::new()
///     });
/// }
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! query_conformance_tests {
    ($($input:tt)*) => {
        $crate::__conformance_macro! { __query_cases, query, [] $($input)* }
    };
}

/// Calls `$crate::$callback! { { args } name: "rule", ... }` with every query case.
#[doc(hidden)]
#[macro_export]
macro_rules! __query_cases {
    ($callback:ident { $($args:tt)* }) => {
        $crate::$callback! {
            { $($args)* }
            q01_events_by_persistence_id_bounds: "Q1 current_events_by_persistence_id honours from and to",
            q02_slice_ranges_partition_ids: "Q2 slice ranges partition the ids of an entity type: no overlap, no hole",
            q03_events_by_tag: "Q3 current_events_by_tag gives exactly the tagged events, each id in order",
            q04_resume_from_offset_delivers_exactly_the_rest: "Q4 resuming from any element's stored offset gives exactly the rest",
            q05_live_query_delivers_new_events: "Q5 live queries deliver new events and resume without repeats",
            q06_late_commit_is_delivered_once: "Q6 an event committing after a later one was delivered is delivered once",
            q07_rolled_back_write_holds_nothing: "Q7 a rolled-back write holds no query up",
            q08_concurrent_writers_give_every_event_once: "Q8 50 ids x 20 tagged events written concurrently give exactly 1,000 distinct envelopes in order per id",
            q09_deleted_events_are_not_delivered: "Q9 deleted events are not delivered; queries go on after them",
            q10_current_persistence_ids_are_paged: "Q10 current_persistence_ids pages in ascending order after `after`, at most `limit`",
            q11_envelopes_decode_into_the_event_type: "Q11 envelopes decode into the event type; a bad payload is an error naming it",
            q12_bad_arguments_are_errors: "Q12 a bad slice range or offset kind is an error",
            q13_late_commit_keeps_the_order_of_an_id: "Q13 an id's next event waits for its late-committing previous one",
            q14_settled_pass_delivers_what_the_fast_pass_passed: "Q14 an event visible far behind the live edge comes from the settled pass once the window passed",
            q15_pipelined_writes_of_one_id_keep_their_order: "Q15 writes of one id issued without waiting are stored and delivered in sequence order",
            q16_payloads_of_every_size_come_back_byte_for_byte: "Q16 payloads of every size and every byte value come back byte for byte, in order, on every query",
            q17_tags_are_matched_exactly: "Q17 a query by tag matches odd tags exactly; an event carrying a tag twice comes once",
            q18_odd_persistence_ids_keep_their_entity_type: "Q18 ids with the separator in odd places, non-ASCII or 255 bytes long belong to the entity type before the first `|`",
            q19_resume_inside_one_timestamp_delivers_exactly_the_rest: "Q19 resuming inside more than a page of events with one timestamp gives exactly the rest",
            q20_live_events_by_persistence_id_ends_after_to: "Q20 the live events_by_persistence_id ends once every event up to `to` was delivered, also when `to` is not stored",
            q21_live_queries_catch_up_without_waiting_for_a_refresh: "Q21 live queries read stored pages one after another without waiting for the refresh interval",
            q22_persistence_ids_are_those_that_stored_events: "Q22 current_persistence_ids lists ids that stored events, not ids that only took ownership",
            q23_catch_up_reading_ahead_delivers_every_event_once: "Q23 a catch-up reading windows of timestamps ahead delivers every stored event once, in order, and resumes exactly",
        }
    };
}
