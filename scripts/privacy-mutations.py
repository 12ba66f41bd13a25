#!/usr/bin/env python3
"""Mutation check of the privacy tests: apply each mutation to the source, run
tests/test_privacy_wiring.py (without its slow canary audit), the DP-Sinkhorn secret-noise test, the batched
sweep's member-equals-its-run and exhausted-member tests and the Laplace privatize stage's secret-generator test, report
which test caught it, restore the source. A privacy test that no mutation fails proves nothing; a mutation
that no test catches is a hole.

Every DP-Sinkhorn path (the fast step, its CUDA graph, the batched sweep, the adversarial variant) trains with
privacy/sanitizers.py::WholeBatchSanitizer (in the packed step one per member, with the member's own clip, sigma and
noise stream: two mutations mix them up, caught by the batched sweep's member-equals-its-run test) -- the class privacy/audit.py audits -- so the sanitizer mutations
target that file (DP-MERF's, DP-SGD's and the central baseline's barriers: privacy/record_sanitizers.py).

The Monte-Carlo audits (tests/test_privacy_audit.py) and the DP-MERF, DP-CGAN and central-baseline tests run too: a mutation inside a
sanitizer must be caught by its audit, not only by a wiring test.

A mutation of what leaves the machine (a statistic of the training records in a released metrics.json or a job's
log, dvc.yaml's push flags) names, as a fifth element, the tests that must catch it; they run instead of the above.
The release ledger's mutations (budgets, reservations, what each release path records) run the ledger's own tests
instead (LEDGER_TESTS: the reservation, refusal and ledger tests and the wavelet baseline's two ledger tests, stopping
at the first failure), named beside each of them.

A mutation that must change two places at once (a call moved) gives a tuple of (old, new) pairs as its third
element, and None as its fourth.

Each line of output: INDEX | mutation | caught by: TESTS (or NOT CAUGHT); the exit status is 1 when any
mutation was not caught."""
import argparse, pathlib, subprocess, sys
R = pathlib.Path(__file__).resolve().parents[1]
WIRING_TESTS = ['tests/test_privacy_wiring.py', 'tests/test_privacy_audit.py', 'tests/test_dp_merf.py', 'tests/test_dp_cgan.py',
                'tests/test_central_baseline.py',
                '-k', 'not canary',
                'tests/test_dp_sinkhorn.py::test_secret_noise_runs_differ_resume_exactly_and_release_no_private_values',
                'tests/test_batched_sweep.py::test_each_member_equals_its_one_at_a_time_run',
                'tests/test_batched_sweep.py::test_a_sweep_whose_second_member_is_exhausted_refuses_before_any_weight_moves',
                'tests/test_privatize.py::test_secret_laplace_privatize_draws_its_noise_from_the_generator_the_stage_hands_it']
LEDGER_TESTS = ['-x', 'tests/test_ledger_reservations.py', 'tests/test_ledger_refusals.py', 'tests/test_release_ledger.py',
                '-k', 'not editing',  # (the DVC round trip: minutes, and it adds no case these lack)
                'tests/test_wavelet_baseline.py::test_the_method_trains_end_to_end_through_the_one_loop',
                'tests/test_wavelet_baseline.py::test_the_wavelet_baseline_is_refused_by_any_finite_budget_before_it_reads_a_record']
#: The ledger faults of issue 71 (tests/test_ledger_faults.py), each run against the test that catches it.
FAULTS = 'tests/test_ledger_faults.py::'
RACE = [FAULTS + 'test_two_jobs_held_between_reading_the_ledger_and_reserving_cannot_both_pass_a_budget_for_one']
WHERE = ['tests/test_ledger_faults.py', '-k', 'any_folder_of_the_workspace']
UPKEEP = ['tests/test_ledger_upkeep.py']  # the older layout, pending entries, the lock's notice, file modes
M = [
 ("sigma/2 in the DP-Sinkhorn step", "src/dpsynth/methods/dp_sinkhorn/run.py",
  "sigma=sigma if private and h.sanitizer == \"image\" else None, q=q)", "sigma=sigma / 2 if private and h.sanitizer == \"image\" else None, q=q)"),
 ("q/2 in the DP-Sinkhorn step", "src/dpsynth/methods/dp_sinkhorn/run.py",
  "sigma=sigma if private and h.sanitizer == \"image\" else None, q=q)", "sigma=sigma if private and h.sanitizer == \"image\" else None, q=q / 2)"),
 ("q x2 in the DP-Sinkhorn step", "src/dpsynth/methods/dp_sinkhorn/run.py",
  "sigma=sigma if private and h.sanitizer == \"image\" else None, q=q)", "sigma=sigma if private and h.sanitizer == \"image\" else None, q=2 * q)"),
 ("clip x2 (the whole-batch sanitizer every DP-Sinkhorn path trains with)", "src/dpsynth/privacy/sanitizers.py",
  "priv, priv_norm = clip_rows(flat[:, :n].reshape(t, -1), self.clip)", "priv, priv_norm = clip_rows(flat[:, :n].reshape(t, -1), 2 * self.clip)"),
 ("clip skipped (the whole-batch sanitizer)", "src/dpsynth/privacy/sanitizers.py",
  "priv, priv_norm = clip_rows(flat[:, :n].reshape(t, -1), self.clip)", "priv, priv_norm = flat[:, :n].reshape(t, -1), torch.linalg.vector_norm(flat[:, :n].reshape(t, -1).double(), dim=1)"),
 ("noise left off the n private images", "src/dpsynth/privacy/sanitizers.py",
  "released = priv + noise\n        parts = [released]", "released = priv\n        parts = [released]"),
 ("noise on the wrong tensor (before the clip, param ablation)", "src/dpsynth/privacy/sanitizers.py",
  "        clipped, norms = clip_rows(grads.reshape(grads.shape[0], -1), self.clip)\n        noise = draw_noise(clipped.shape, self.noise_std, self.generator, clipped)\n        released = clipped + noise",
  "        noise = draw_noise(grads.reshape(grads.shape[0], -1).shape, self.noise_std, self.generator, grads)\n        clipped, norms = clip_rows(grads.reshape(grads.shape[0], -1) + noise, self.clip)\n        released = clipped"),
 ("sigma/2 in the param ablation", "src/dpsynth/methods/dp_sinkhorn/run.py",
  "ParamGradSanitizer(list(G.parameters()), PARAM_CLIP, sigma,", "ParamGradSanitizer(list(G.parameters()), PARAM_CLIP, sigma / 2,"),
 ("sigma/2 in the GS-WGAN step", "src/dpsynth/methods/gs_wgan.py",
  "PerSampleSanitizer(h.clip, sigma, h.batch_size", "PerSampleSanitizer(h.clip, sigma / 2, h.batch_size"),
 ("clip x2 (per-sample sanitizer)", "src/dpsynth/privacy/sanitizers.py",
  "clipped, norms = clip_rows(grads.reshape(t * b, -1), self.sample_bound)", "clipped, norms = clip_rows(grads.reshape(t * b, -1), 2 * self.sample_bound)"),
 ("shard choice from half the critics (q x2 on them)", "src/dpsynth/methods/gs_wgan.py",
  "j = int(torch.randint(0, bank.copies, (1,), generator=gens[\"pick\"]))", "j = int(torch.randint(0, max(1, bank.copies // 2), (1,), generator=gens[\"pick\"]))"),
 ("seeded noise instead of OS entropy", "src/dpsynth/privacy/randomness.py",
  "return gen.manual_seed(secrets.randbits(63))", "return gen.manual_seed(1234)"),
 ("released epsilon replaced by the target", "src/dpsynth/privacy/report.py",
  "mechanism=mechanism, sigma=sigma, delta=delta, epsilon=flatten_epsilon(eps), headline=\"rdp_classic\",",
  "mechanism=mechanism, sigma=sigma, delta=delta, epsilon={**flatten_epsilon(eps), **({\"rdp_classic\": target_epsilon} if target_epsilon else {})}, headline=\"rdp_classic\","),
 ("steps derived from 2*sigma (derive mode)", "src/dpsynth/privacy/central_mechanisms.py",
  "steps = steps_within(sigma, batch_size, eps, delta)", "steps = steps_within(2 * sigma, batch_size, eps, delta)"),
 ("secret numpy generator seeded with a constant", "src/dpsynth/privacy/randomness.py",
  "return np.random.default_rng(secrets.randbits(128))", "return np.random.default_rng(1234)"),
 ("DP-MERF release noise halved (sigma/2 into the sanitizer)", "src/dpsynth/methods/dp_merf.py",
  "san = MeanEmbeddingSanitizer(sigma, len(x),", "san = MeanEmbeddingSanitizer(sigma / 2, len(x),"),
 ("DP-MERF sensitivity halved (noise for 1/n instead of 2/n)", "src/dpsynth/privacy/record_sanitizers.py",
  "return 2.0 * self.bound * self.sigma / self.n_records", "return 1.0 * self.bound * self.sigma / self.n_records"),
 ("DP-MERF embedding of the rows before the norm bound (clip skipped)", "src/dpsynth/privacy/record_sanitizers.py",
  "clipped, norms = clip_rows(features.reshape(-1, d), self.bound)",
  "clipped, norms = features.reshape(-1, d), torch.linalg.vector_norm(features.reshape(-1, d).double(), dim=1)"),
 ("DP-SGD GAN clip skipped (the per-example sanitizer of DP-CGAN's discriminator)", "src/dpsynth/privacy/record_sanitizers.py",
  "clipped, norms = clip_rows(grads.reshape(t * b, p), self.clip)",
  "clipped, norms = grads.reshape(t * b, p), torch.linalg.vector_norm(grads.reshape(t * b, p).double(), dim=1)"),
 ("DP-MERF release noise from a constant-seeded generator", "src/dpsynth/methods/dp_merf.py",
  "\"noise\": ctx.noise.torch_generator(ctx.device, 21)}", "\"noise\": torch.Generator(ctx.device).manual_seed(1234)}"),
 ("DP-MERF release noise seeded from the public run seed", "src/dpsynth/methods/dp_merf.py",
  "\"noise\": ctx.noise.torch_generator(ctx.device, 21)}",
  "\"noise\": torch.Generator(ctx.device).manual_seed(int(np.random.SeedSequence([ctx.seed, 0x3F1]).generate_state(1)[0]))}"),
 ("DP-MERF release rescaled by the true per-class counts (n / n_c, un-noised)", "src/dpsynth/methods/dp_merf.py",
  "    return san.release(), san",
  "    counts = np.maximum(np.bincount(y, minlength=int(ctx.data.num_classes)), 1)\n"
  "    return san.release() * torch.from_numpy(len(y) / counts).float().to(ctx.device)[:, None], san"),
 ("DP-MERF bandwidth from the private images (median heuristic) instead of params", "src/dpsynth/methods/dp_merf.py",
  "h.n_features, h.bandwidth_sq, ctx.seed, ctx.device)",
  "h.n_features, float(np.median(((x.reshape(len(x), -1) / 255.0 - x.reshape(len(x), -1).mean(0) / 255.0) ** 2)"
  ".sum(1))), ctx.seed, ctx.device)"),
 ("packed step: every member noised from member 0's noise stream", "src/dpsynth/methods/dp_sinkhorn/step.py",
  "m.spec.clip, m.spec.sigma, self.spec.n, m.gens[\"noise\"], defer_check=True,",
  "m.spec.clip, m.spec.sigma, self.spec.n, self.members[0].gens[\"noise\"], defer_check=True,"),
 ("packed step: every member clipped and noised with member 0's clip and sigma", "src/dpsynth/methods/dp_sinkhorn/step.py",
  "m.spec.clip, m.spec.sigma, self.spec.n, m.gens[\"noise\"], defer_check=True,",
  "self.spec.clip, self.spec.sigma, self.spec.n, m.gens[\"noise\"], defer_check=True,"),
 ("DP-CGAN discriminator steps on the clean real gradient (the sanitizer runs, its output unused)",
  "src/dpsynth/methods/dp_cgan.py",
  "d_grad = self.sanitizer.release(real_rows) + self.sanitizer.clip_mean(fake_rows)",
  "d_grad = (self.sanitizer.release(real_rows), real_rows.sum(dim=0) / b)[1] + self.sanitizer.clip_mean(fake_rows)"),
 ("batched sweep: only member 0's guard charged before the step", "src/dpsynth/methods/dp_sinkhorn/sweep.py",
  "        for guard in self.guards:\n            if guard is not None:\n                guard.step()\n        losses, _ = self()",
  "        for guard in self.guards[:1]:\n            if guard is not None:\n                guard.step()\n        losses, _ = self()"),
 ("local Laplace privatize ignores the secret generator the stage hands it (a fixed seed)",
  "src/dpsynth/privacy/local_mechanisms.py",
  "return laplace_mechanism(x, radius, epsilon, rng, dct_image_shape=dct_image_shape, dct_quantile=dct_quantile)",
  "return laplace_mechanism(x, radius, epsilon, 0, dct_image_shape=dct_image_shape, dct_quantile=dct_quantile)"),
 ("a run's GS-WGAN IS and training-split FID left in its released metrics.json", "src/dpsynth/stages/evaluate.py",
  "scores[\"protocols\"][GS_WGAN], kept = release_training_split(", "_, kept = release_training_split(",
  ["tests/test_gswgan_stage.py"]),
 ("the report shows the kept training-split IS and FID whatever data.public says", "src/dpsynth/report/runs.py",
  "and metrics.get(\"dataset\") in public:", "and True:",
  ["tests/test_gswgan_stage.py::test_a_dataset_not_declared_public_keeps_is_and_fid_under_the_private_root"]),
 ("the IS network's key (a hash of its training records) in the record", "src/dpsynth/evaluate/classifier_is.py",
  "\"cached\": cached,\n                        \"device\": fitted.device,",
  "\"cached\": cached, \"key\": self.key[:20],\n                        \"device\": fitted.device,",
  ["tests/test_gswgan_protocol.py::test_classifier_is_uses_the_real_rows_cnn_and_scores_real_images_near_ten"]),
 ("the report's tables and figures pushable (as when a flag followed data.public)", "src/dpsynth/paths.py",
  "    if any(_under(path, root) for root in REPORT_OUTPUTS):", "    if False:",
  ["tests/test_workflow_dvc.py::test_every_output_flag_follows_the_one_release_rule"]),
 ("a dvc.yaml whose push flags params.yaml no longer allows is not refused", "src/dpsynth/workflow/dvc.py",
  "    if stale:\n        more =", "    if False:\n        more =",
  ["tests/test_workflow_dvc.py::test_a_dvc_yaml_whose_push_flags_the_rule_forbids_stops_both_runners"]),
 ("evaluate prints the real-data row's scores to its log", "src/dpsynth/stages/evaluate.py",
  "    if record.is_real_data:\n        print(", "    if False:\n        print(",
  ["tests/test_gswgan_stage.py"]),
 ("the real-data row's progress lines show its classifiers' accuracies", "src/dpsynth/stages/evaluate.py",
  "device=dev, show_scores=False)", "device=dev, show_scores=True)", ["tests/test_gswgan_stage.py"]),
 ("evaluate prints the W2 to a cell's own training records (and GS-WGAN's kept IS and FID) to its log",
  "src/dpsynth/stages/evaluate.py",
  "print(f\"{experiment}: {what} ({OUTSIDE_GUARANTEE}) -> {out}\")",
  "print(f\"{experiment}: {what} {value} ({OUTSIDE_GUARANTEE}) -> {out}\")",
  ["tests/test_reshetova_fig11.py::test_evaluate_keeps_the_w2_to_the_runs_own_clean_training_records_under_the_private_root",
   "tests/test_gswgan_stage.py"]),
 ("w2noise prints its sweep's W2s (clean records, seeded noise) to its log", "src/dpsynth/stages/w2noise.py",
  "f\"{check}: done ({row['seconds']:.1f} s)\"", "f\"{check}: W2 {row['w2']:.4f} ({row['seconds']:.1f} s)\"",
  ["tests/test_w2_fig5.py::test_the_sweeps_log_names_each_run_and_prints_none_of_its_w2"]),
 # the release ledger (LEDGER_TESTS)
 ("ledger: nothing reserved before the noise (the budget checked, the release appended only once made)",
  "src/dpsynth/privacy/ledger_store.py",
  "            if new:\n                self._write(fd, new)", "            pass", LEDGER_TESTS),
 ("ledger: a pending reservation (a job killed after its noise) not counted",
  "src/dpsynth/privacy/releases.py", "COUNTED = (PENDING, CONFIRMED, FAILED)", "COUNTED = (CONFIRMED, FAILED)",
  LEDGER_TESTS),
 ("ledger: a job failing after its noise cancels its reservation (not counted)",
  "src/dpsynth/privacy/ledger_store.py", "status = FAILED if drawn() else CANCELLED", "status = CANCELLED",
  LEDGER_TESTS),
 ("ledger: train does not record an approximately private (wavelet) run, nor budget it",
  "src/dpsynth/stages/train_ledger.py", "self.cost = (math.inf, 0.0) if repro or approx else None",
  "self.cost = (math.inf, 0.0) if repro else None", LEDGER_TESTS),
 ("ledger: a fresh run's budget checked only at the first step (the wavelet baseline reads its clean records first)",
  "src/dpsynth/stages/train_ledger.py", "if self.cost is None or budget is None or checkpoint.is_file():",
  "if True:", LEDGER_TESTS),
 ("ledger: privatize does not record a privatized copy on disk that the ledger lacks",
  "src/dpsynth/stages/privatize.py", "        if ledger.record_found(entry):", "        if False:", LEDGER_TESTS),
 ("ledger: a reproducible-noise privatization budgeted and recorded at its finite epsilon",
  "src/dpsynth/stages/privatize.py", "    free = params.privacy_noise == \"reproducible\"", "    free = False",
  LEDGER_TESTS),
 ("ledger: an already-done train whose model the ledger lacks says done and records nothing",
  "src/dpsynth/stages/train.py", "elif summary[\"already_done\"] and ledger.record_found(ctx):", "elif False:",
  LEDGER_TESTS),
 ("ledger: train-sweep trains its cells together without reserving them (no budget check)",
  "src/dpsynth/stages/train.py", "    held = reserve_cells(", "    held = [] and reserve_cells(", LEDGER_TESTS),
 ("ledger: a ledger write cut short (a full disk) taken for success",
  "src/dpsynth/privacy/ledger_store.py", "                n = os.write(fd, data[done:])",
  "                n = len(data) - done\n                try:\n                    os.write(fd, data[done:])\n"
  "                except OSError:\n                    pass", LEDGER_TESTS),
 ("ledger: a hand-edited negative epsilon read as a release", "src/dpsynth/privacy/releases.py",
  "    if x < 0 or x > upper:", "    if x > upper:", LEDGER_TESTS),
 # issue 71: the faults the ledger's tests used to let through
 ("ledger: its lock removed (two jobs read, check and append at once)", "src/dpsynth/privacy/ledger_store.py",
  "        mode = fcntl.LOCK_EX\n", "        return\n", RACE),
 ("ledger: its lock taken shared", "src/dpsynth/privacy/ledger_store.py",
  "        mode = fcntl.LOCK_EX\n", "        mode = fcntl.LOCK_SH\n", RACE),
 ("ledger: reserve reads the ledger before taking the lock (appends under it)", "src/dpsynth/privacy/ledger_store.py",
  "        with self._locked() as fd:\n            known, damaged = self._read_locked(fd)\n            out, new = [], []",
  "        known, damaged = self.read()\n        with self._locked() as fd:\n            out, new = [], []", RACE),
 ("ledger: train reserves after its training loop, not before its first step", "src/dpsynth/methods/loop.py",
  (("        ctx.before_release(state)\n    run.resume()", "        pass\n    run.resume()"),
   ("    stepper.check()  # nothing is released after a refused step (on a GPU the refusal is deferred)\n",
    "    stepper.check()  # nothing is released after a refused step (on a GPU the refusal is deferred)\n"
    "    if ctx.before_release is not None:\n        ctx.before_release(state)\n")), None,
  [FAULTS + 'test_a_training_job_killed_after_its_first_step_leaves_a_pending_reservation_the_budget_counts']),
 ("ledger: a release found on disk confirmed under another run's open reservation (the run key ignored)",
  "src/dpsynth/privacy/ledger_store.py", " and r.stage == entry.stage\n                     and r.key == entry.key]",
  " and r.stage == entry.stage]", [FAULTS + 'test_a_release_found_on_disk_never_settles_another_runs_open_reservation']),
 ("ledger: the report's EVER MADE row composes confirmed entries only", "src/dpsynth/report/ledger.py",
  "    total = compose(mine, damaged)", "    total = compose([r for r in mine if r.status == CONFIRMED], damaged)",
  [FAULTS + 'test_the_reports_ever_made_row_counts_pending_and_failed_reservations']),
 ("ledger: a reproducible-noise train reserved at its finite epsilon", "src/dpsynth/stages/train_ledger.py",
  "        elif run.privacy.mode == \"non_private\" or repro:", "        elif run.privacy.mode == \"non_private\":",
  [FAULTS + 'test_a_reproducible_noise_train_is_reserved_and_recorded_as_no_guarantee']),
 ("ledger: a reproducible-noise train recorded at its finite epsilon", "src/dpsynth/stages/train_ledger.py",
  "        free = is_reproducible(report) or approx or math.isinf(eps)", "        free = approx or math.isinf(eps)",
  [FAULTS + 'test_a_reproducible_noise_train_is_reserved_and_recorded_as_no_guarantee']),
 ("ledger: a ledger folder accepted under private/ (which make clean-results deletes)", "src/dpsynth/stages/common.py",
  "(\"private\", \"private\"), ", "", WHERE),
 ("ledger: the workspace's folders resolved against the current folder only", "src/dpsynth/privacy/ledger_place.py",
  "    bases = [Path.cwd()] + ([Path(workspace)] if workspace is not None else [])", "    bases = [Path.cwd()]",
  WHERE),
 ("ledger: an older layout's workspace ledger (private/ledger/releases.jsonl) not imported",
  "src/dpsynth/privacy/ledger_store.py",
  "        ledger_place.import_old(self, ledger_place.old_ledgers(workspace, private_roots))\n", "",
  UPKEEP + ['-k', 'older_layout']),
 ("ledger: an older layout's lines imported again by every job", "src/dpsynth/privacy/ledger_place.py",
  "            new = [e for e in entries if e.origin not in have]", "            new = entries",
  UPKEEP + ['-k', 'older_layout']),
 ("ledger: a refusal does not name the pending reservations apart from confirmed releases",
  "src/dpsynth/privacy/releases.py", "if unsettled else \"\"\n", "if False else \"\"\n",
  UPKEEP + ['-k', 'killed']),
 ("ledger: a reservation settled by hand stops counting without --no-noise-drawn", "src/dpsynth/privacy/ledger_store.py",
  "status=CANCELLED if no_noise else FAILED", "status=CANCELLED", UPKEEP + ['-k', 'killed']),
 ("ledger: the ledger file created 0600 whatever the umask (a group's folder refuses all but its creator)",
  "src/dpsynth/privacy/ledger_store.py", "os.O_CREAT, 0o666)", "os.O_CREAT, 0o600)", UPKEEP + ['-k', 'umask']),
 # bad input that hung every reader of params.yaml (issue 71 item 2): each test runs under a timeout
 ("params.yaml: a recursive alias not named by the event scan", "src/dpsynth/config/loader.py",
  "            elif isinstance(event, yaml.AliasEvent) and live.get(event.anchor, (0, 0))[0]:",
  "            elif False:", ['tests/test_bad_input_config.py', '-k', 'recursive_alias and lol']),
 ("params.yaml: the expansion counter loops on a node that contains itself", "src/dpsynth/config/loader.py",
  "            if id(node) in path:\n", "            if False:\n",
  ['tests/test_bad_input_config.py::test_the_expansion_counter_stops_on_a_node_that_contains_itself']),
 ("params.yaml: the expansion counter unmemoized (a bomb runs for hours)", "src/dpsynth/config/loader.py",
  (("        if id(node) in memo:\n            continue\n", ""),
   ("            stack += [(c, False) for c in children if id(c) not in memo]",
    "            stack += [(c, False) for c in children]")), None,
  ['tests/test_bad_input_config.py::test_both_bombs_are_refused_in_milliseconds']),
 ("params.yaml: the bomb limit counts every value, not what aliases add", "src/dpsynth/config/loader.py",
  "    return expanded - distinct", "    return expanded",
  ['tests/test_bad_input_config.py::test_a_large_file_with_no_alias_is_no_bomb']),
 # the central-DP baseline (method class_gaussian): its sanitizer, its accounting, its order against the stage's
 # reservation, its secret noise, its one read of the data
 ("central baseline: noise at sigma/2", "src/dpsynth/privacy/record_sanitizers.py",
  "        self.stds = class_moment_stds(self.sigma)\n", "        self.stds = class_moment_stds(self.sigma / 2)\n",
  ['tests/test_central_baseline.py']),
 ("central baseline: noise left off the class sums", "src/dpsynth/privacy/record_sanitizers.py",
  "\"sums\": sums + noise[\"sums\"],", "\"sums\": sums + 0.0 * noise[\"sums\"],", ['tests/test_central_baseline.py']),
 ("central baseline: released at a loosely calibrated sigma (the accountant's sigma x 1.5)",
  "src/dpsynth/methods/central_baseline.py",
  "    sigma = release_sigma(ctx)\n", "    sigma = 1.5 * release_sigma(ctx)\n", ['tests/test_central_baseline.py']),
 ("central baseline: the release drawn in train(), before the stage has reserved it", "src/dpsynth/methods/central_baseline.py",
  "    stepper = CentralBaselineStepper(ctx, G, sigma, arch)\n",
  "    stepper = CentralBaselineStepper(ctx, G, sigma, arch)\n    stepper.step()\n", ['tests/test_central_baseline.py']),
 ("central baseline: the checkpoint keeps no released statistics", "src/dpsynth/methods/central_baseline.py",
  "        return {\"statistics\": self.stats}", "        return {\"statistics\": None}", ['tests/test_central_baseline.py']),
 ("central baseline: a constant-seeded 'secret' noise generator", "src/dpsynth/methods/central_baseline.py",
  "self.gens = {\"noise\": ctx.noise.torch_generator(ctx.device, NOISE_STREAM)}",
  "self.gens = {\"noise\": torch.Generator(ctx.device).manual_seed(NOISE_STREAM)}", ['tests/test_central_baseline.py']),
 ("central baseline: records not clipped to the unit ball (the class-moments sanitizer)",
  "src/dpsynth/privacy/record_sanitizers.py",
  "        z, norms = clip_rows(records.reshape(t * n, d), 1.0)\n",
  "        z, norms = records.reshape(t * n, d), torch.linalg.vector_norm(records.reshape(t * n, d).double(), dim=1)\n",
  ['tests/test_central_baseline.py', 'tests/test_privacy_audit.py']),
 ("central baseline: the basis taken from the clean second moment, not the released one",
  "src/dpsynth/privacy/record_sanitizers.py",
  "basis = torch.linalg.eigh(second)[1]", "basis = torch.linalg.eigh(moments.sum(1))[1]", ['tests/test_central_baseline.py']),
]
def _pairs(m: tuple) -> list[tuple[str, str]]:
    """A mutation's (old, new) replacements: one, or the tuple of pairs a mutation of two places gives."""
    return list(m[2]) if isinstance(m[2], tuple) else [(m[2], m[3])]


ap = argparse.ArgumentParser(prog="scripts/privacy-mutations.py", description=__doc__.split("\n\n")[0],
                             formatter_class=argparse.RawDescriptionHelpFormatter,
                             epilog="mutations:\n" + "\n".join(f"  {i:2d}  {m[0]}  ({m[1]})" for i, m in enumerate(M)))
ap.add_argument("index", nargs="*", type=int, help="run only these mutations (default: all)")
ap.add_argument("--list", action="store_true", help="list the mutations and exit")
ap.add_argument("--check", action="store_true", help="check that every mutation still applies (its source text "
                "occurs exactly once) and exit, without running any test")
args = ap.parse_args()
if args.list:
    for i, m in enumerate(M):
        print(f"{i:2d} | {m[0]} | {m[1]}")
    sys.exit(0)
if args.check:
    stale = [f"{i} | {m[0]} | {m[1]}: its source text {old[:40]!r} occurs {(R / m[1]).read_text().count(old)} times"
             for i, m in enumerate(M) for old, _ in _pairs(m) if (R / m[1]).read_text().count(old) != 1]
    print("\n".join(stale) or f"all {len(M)} mutations apply")
    sys.exit(1 if stale else 0)
bad = [i for i in args.index if not 0 <= i < len(M)]
if bad:
    ap.error(f"no mutation {bad[0]} (0..{len(M) - 1}; see --list)")
missed = 0
for i, (name, f, old, new, *own) in enumerate(M):
    if args.index and i not in args.index: continue
    p = R / f; src = p.read_text(); mutated = src
    for o, n in _pairs((name, f, old, new)):
        assert mutated.count(o) == 1, (name, o, mutated.count(o))
        mutated = mutated.replace(o, n)
    p.write_text(mutated)
    try:
        r = subprocess.run([str(R/'.venv/bin/pytest'), '-q', '-p', 'no:cacheprovider', *(own[0] if own else WIRING_TESTS)],
                           cwd=R, capture_output=True, text=True, timeout=900)
        # a failed test, or one whose fixture errors (the mutated stage refused by a later one): the suite is red
        failed = [l.split('::')[-1].split(' ')[0] for l in r.stdout.splitlines() if l.startswith(('FAILED', 'ERROR'))]
        print(f"{i} | {name} | caught by: {', '.join(failed) or 'NOT CAUGHT'}", flush=True)
        missed += not failed
    finally:
        p.write_text(src)
sys.exit(1 if missed else 0)
