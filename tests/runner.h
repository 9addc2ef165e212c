/* runner.h - the tests' tiny runner: checks that record a failure with file:line and a
   message, and the table of every test function (main.c runs them). */
#ifndef TESTS_RUNNER_H
#define TESTS_RUNNER_H

#if defined(__GNUC__) || defined(__clang__)
#define RUNNER_PRINTF(fmt_index, first_arg) __attribute__((format(printf, fmt_index, first_arg)))
#else
#define RUNNER_PRINTF(fmt_index, first_arg)
#endif

/* Every test, in the order main runs them. A test is `void name(void)`. */
#define TEST_LIST(X)                        \
    X(test_score_hand_fm)                   \
    X(test_score_hand_ffm)                  \
    X(test_score_hand_fwfm)                 \
    X(test_score_matches_reference)         \
    X(test_score_fwfm_dense_rows)           \
    X(test_score_values_absent_is_ones)     \
    X(test_score_multiclass_per_class)      \
    X(test_score_linear_only)               \
    X(test_score_fwfm_unit_r_is_fm)         \
    X(test_initialization)                  \
    X(test_initialization_chunks)           \
    X(test_predict_probabilities)           \
    X(test_predict_labels)                  \
    X(test_gradients_finite_differences)    \
    X(test_label_smoothing_binary)          \
    X(test_label_smoothing_multiclass)      \
    X(test_optimizer_first_step_sgd)        \
    X(test_optimizer_first_step_adagrad)    \
    X(test_optimizer_first_step_rowwise_adagrad) \
    X(test_optimizer_first_step_adam)       \
    X(test_optimizer_first_step_ftrl)       \
    X(test_optimizer_steps_match_reference) \
    X(test_ftrl_l1_gives_exact_zeros)       \
    X(test_batch_step_matches_reference)    \
    X(test_inplace_equals_batched)          \
    X(test_simd_widths_agree)               \
    X(test_fwfm_kept_terms_equal_pairs)     \
    X(test_batch_linear_line_search)        \
    X(test_batch_ffm_single_nonzero_row)    \
    X(test_row_weight_scales_step)          \
    X(test_class_weight_balanced)           \
    X(test_class_weight_explicit)           \
    X(test_determinism_same_seed)           \
    X(test_determinism_fixed_threads)       \
    X(test_threads_bit_identical)           \
    X(test_batch_ffm_repeated_feature)      \
    X(test_hogwild_disjoint_shares_exact)   \
    X(test_thread_chunks_exact)             \
    X(test_thread_chunks_reproducible)      \
    X(test_hogwild_fwfm_holds_r_back)       \
    X(test_train_is_create_plus_fit)        \
    X(test_predict_from_many_threads)       \
    X(test_predict_thread_count_invariant)  \
    X(test_metric_auc)                      \
    X(test_metric_logloss_rmse)             \
    X(test_evaluate_matches_metrics)        \
    X(test_metrics_value)                   \
    X(test_invalid_params)                  \
    X(test_invalid_data_at_fit)             \
    X(test_invalid_data_at_predict)         \
    X(test_invalid_data_on_threads)         \
    X(test_invalid_data_at_train)           \
    X(test_create_impossible_size)          \
    X(test_learn_binary_interactions)       \
    X(test_learn_regression)                \
    X(test_learn_multiclass)                \
    X(test_learn_hogwild)                   \
    X(test_learn_defaults_binary)           \
    X(test_learn_defaults_regression_multiclass) \
    X(test_learn_defaults_large_batch)      \
    X(test_text_quirks_libffm)              \
    X(test_text_quirks_libsvm)              \
    X(test_text_unlabeled)                  \
    X(test_text_labels_by_task)             \
    X(test_text_format_detection)           \
    X(test_text_numbers_match_strtof)       \
    X(test_text_long_numbers)               \
    X(test_text_errors)                     \
    X(test_text_threads_identical)          \
    X(test_text_threads_error_line)         \
    X(test_read_large_file_chunks)          \
    X(test_read_realistic_files)            \
    X(test_read_stdin)                      \
    X(test_write_text_round_trip)           \
    X(test_write_unlabeled_empty_row)       \
    X(test_write_refusals)                  \
    X(test_binary_round_trip)               \
    X(test_write_cache_records_source)      \
    X(test_write_through_link_and_device)     \
    X(test_binary_refused)                  \
    X(test_model_save_load_round_trip)      \
    X(test_model_without_state_large)       \
    X(test_model_class_weights_survive)     \
    X(test_model_resume_exact)              \
    X(test_model_clone_independent)         \
    X(test_model_load_refuses_bad_files)    \
    X(test_model_save_crash_safe)           \
    X(test_model_load_crafted_class_weights) \
    X(test_model_inspect_agrees_with_load)    \
    X(test_model_files_of_format_1_load)      \
    X(test_inplace_maps_the_other_layout)     \
    X(test_inplace_few_rows_allocate_nothing) \
    X(test_alloc_failure_takes_no_step)     \
    X(test_model_map_outlives_its_file)       \
    X(test_model_half_conversions)            \
    X(test_model_half_serving)                \
    X(test_model_ffm_long_rows)               \
    X(test_model_half_files_before_records_load) \
    X(test_model_half_ffm_records)            \
    X(test_faults_output_writer) \
    X(test_faults_unwritable_folder) \
    X(test_faults_kill_during_save) \
    X(test_faults_signal_during_save) \
    X(test_faults_file_size_limit) \
    X(test_faults_concurrent_writers) \
    X(test_faults_fifo_output) \
    X(test_faults_tool_descriptor_outputs) \
    X(test_faults_tool_outputs) \
    X(test_faults_tool_same_file) \
    X(test_faults_tool_model_path_first) \
    X(test_faults_tool_signals) \
    X(test_faults_tool_cache_digest) \
    X(test_faults_tool_resume) \
    X(test_faults_tool_stdout_errors) \
    X(test_cli_train_predict_eval)            \
    X(test_cli_epoch_lines_and_auto_stop)     \
    X(test_cli_normalize_and_stop_defaults)   \
    X(test_cli_stdin)                         \
    X(test_cli_convert_and_info)              \
    X(test_cli_errors)                        \
    X(test_cli_hogwild)                       \
    X(test_cli_thread_chunks)                 \
    X(test_cli_resume)                        \
    X(test_cli_export)                        \
    X(test_cli_cache_and_backend)             \
    X(test_cli_literal_zero)                  \
    X(test_cli_default_holdout)               \
    X(test_cli_worse_than_constant)           \
    X(test_cli_tune)                          \
    X(test_cli_tune_errors)                   \
    X(test_failsafe_diverged_mid_batch)     \
    X(test_failsafe_diverged_sgd)             \
    X(test_failsafe_diverged_regression_labels) \
    X(test_failsafe_diverged_tool)            \
    X(test_failsafe_diverged_gpu)             \
    X(test_failsafe_api_null_and_nan)         \
    X(test_failsafe_params_enums)             \
    X(test_failsafe_input_messages)           \
    X(test_failsafe_row_numbers_and_metric_names) \
    X(test_failsafe_nan_metric_is_told)       \
    X(test_failsafe_tool_messages)            \
    X(test_lifecycle_early_stop_restores_best) \
    X(test_lifecycle_early_stop_keep_last) \
    X(test_lifecycle_early_stop_patience_min_delta) \
    X(test_lifecycle_early_stop_metrics) \
    X(test_lifecycle_validation_fraction) \
    X(test_lifecycle_split_and_select)    \
    X(test_lifecycle_warm_start_equals_one_call) \
    X(test_lifecycle_warm_start_through_files) \
    X(test_lifecycle_partial_fit_chunks) \
    X(test_lifecycle_partial_fit_order) \
    X(test_lifecycle_partial_fit_no_epochs) \
    X(test_lifecycle_refusals) \
    X(test_lifecycle_stateless_file) \
    X(test_lifecycle_resume_exact) \
    X(test_lifecycle_top_interactions_fm) \
    X(test_lifecycle_top_interactions_fields) \
    X(test_lifecycle_top_interactions_learned) \
    X(test_lifecycle_bi_interaction) \
    X(test_lifecycle_normalize_rows) \
    X(test_lifecycle_pairs_only) \
    X(test_lifecycle_adagrad_init) \
    X(test_lifecycle_libffm_reference) \
    X(test_lifecycle_top_interactions_n_zero) \
    X(test_api_dataset_view_fits_a_model) \
    X(test_api_threads_zero_is_every_core) \
    X(test_api_enum_names) \
    X(test_api_null_arguments) \
    X(test_api_rows_named_by_their_lines) \
    X(test_cuda_nvrtc_compiles_every_arch) \
    X(test_cuda_cache_round_trip) \
    X(test_cuda_cache_two_processes) \
    X(test_cuda_cache_unwritable) \
    X(test_cuda_settings) \
    X(test_cuda_cache_tool_reports) \
    X(test_cuda_no_driver) \
    X(test_cuda_nvrtc_path_missing) \
    X(test_cuda_training_params) \
    X(test_cuda_nccl_loader) \
    X(test_gpu_predict_parity) \
    X(test_gpu_predict_half)                  \
    X(test_gpu_predict_rowwise)               \
    X(test_gpu_predict_variants) \
    X(test_gpu_resident_repeated) \
    X(test_gpu_cold_then_warm_start) \
    X(test_gpu_errors) \
    X(test_gpu_out_of_memory)               \
    X(test_gpu_train_parity)                \
    X(test_gpu_train_variants)              \
    X(test_gpu_train_fwfm_staged)           \
    X(test_gpu_train_ftrl_zeros)            \
    X(test_gpu_train_deterministic)         \
    X(test_gpu_train_listing)               \
    X(test_gpu_train_early_stopping)        \
    X(test_gpu_train_resume_and_partial)    \
    X(test_gpu_train_streaming)             \
    X(test_gpu_ranks_parity)                \
    X(test_gpu_ranks_deterministic)         \
    X(test_gpu_ranks_lifecycle)             \
    X(test_gpu_ranks_model_larger_than_one) \
    X(test_gpu_ranks_streaming)             \
    X(test_gpu_ranks_linear_only)           \
    X(test_gpu_ranks_errors)                \
    X(test_gpu_ranks_predict)

#define TEST_DECLARE(name) void name(void);
TEST_LIST(TEST_DECLARE)
#undef TEST_DECLARE

/* Records a failure of the running test and prints file:line and the message. */
void runner_fail(const char *file, int line, const char *fmt, ...) RUNNER_PRINTF(3, 4);

/* 1 when TESTS_QUICK is set (not "0"): a heavy test then checks the same property on a smaller
   instance. The sanitizer runs set it; the plain run keeps the full sizes. */
int runner_quick(void);

/* Marks the running test as skipped, with the reason printed next to its name (a test that
   needs a GPU on a machine without one). Failures recorded before still count. */
void runner_skip(const char *fmt, ...) RUNNER_PRINTF(1, 2);

/* |actual - expected| <= atol + rtol * |expected|, else a failure naming both numbers.
   Returns 1 when it holds. NaN never holds. */
int runner_near(const char *file, int line, double actual, double expected, double rtol, double atol, const char *fmt, ...)
    RUNNER_PRINTF(7, 8);

/* CHECK(cond, "format", ...) is an expression: 1 when cond holds, else 0 after recording. */
#define CHECK(cond, ...) ((cond) ? 1 : (runner_fail(__FILE__, __LINE__, __VA_ARGS__), 0))
#define CHECK_NEAR(actual, expected, rtol, atol, ...) runner_near(__FILE__, __LINE__, (actual), (expected), (rtol), (atol), __VA_ARGS__)
/* Stops the test (returns from it) when cond fails: for set-up steps later checks rely on. */
#define REQUIRE(cond, ...)                        \
    do {                                          \
        if (!CHECK(cond, __VA_ARGS__)) return;    \
    } while (0)

#endif
