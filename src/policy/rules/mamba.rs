//! The Mamba radix-cache strategy (`--mamba-radix-cache-strategy`): the Mamba hook
//! (`arg_groups/mamba_hook.py`, `_mamba_radix_cache_resolution` and its validators), on every server that
//! keeps a radix cache.

use super::predicates::{DECODE_PAGE_SIZE, keeps_radix_cache};
use super::{EVERY_SERVER, Fix, PD_SERVERS, Rule, RuleInput, Subject, text, when, when_with};
use crate::api::{DisaggregationSpec, FleetSpec, MambaRadixCacheStrategy};
use crate::policy::argv::{given, number_option, option_value};
use crate::release::{Release, Span, v0_5};

pub(super) const M1: Rule = Rule {
    id: "M1",
    about: "extra_buffer_lazy under PD",
    reproduces: "ServerArgs._validate_mamba_extra_buffer, srt/server_args.py (0.5.17–0.5.18); \
                 validate_mamba_extra_buffer, srt/arg_groups/mamba_hook.py (0.5.19–0.5.23)",
    field: MAMBA_STRATEGY,
    roles: PD_SERVERS,
    messages: &[text(
        "extra_buffer_lazy unsupported under PD disaggregation; use --mamba-radix-cache-strategy extra_buffer.",
    )],
    check: |c| {
        when(
            mamba_radix_cache(c)
                && c.settings.mamba_radix_cache_strategy == Some(MambaRadixCacheStrategy::ExtraBufferLazy),
        )
    },
    fix: Fix::Rewrite { apply: to_extra_buffer, hint: "use extra_buffer" },
    ..Rule::DEFAULT
};

pub(super) const M2: Rule = Rule {
    id: "M2",
    about: "extra_buffer track interval × page size",
    reproduces: "ServerArgs._validate_mamba_extra_buffer, srt/server_args.py (0.5.17–0.5.18); \
                 validate_mamba_extra_buffer, srt/arg_groups/mamba_hook.py (0.5.19–0.5.23): the bare assert on the \
                 track interval",
    field: DECODE_PAGE_SIZE,
    roles: EVERY_SERVER,
    messages: &[text(
        "AssertionError (assert view.mamba_track_interval % view.page_size == 0): --mamba-track-interval \
         {interval} is not a multiple of --page-size {page}",
    )],
    check: |c| {
        if !c.layout.uses_ssm_state() {
            return None;
        }
        extra_buffer_fleets(c).find_map(|fleet| {
            let interval = mamba_track_interval(&fleet.extra_args);
            let page = i64::from(fleet.effective_page_size().max(1));
            when_with(interval % page != 0, vec![("interval", interval.to_string()), ("page", page.to_string())])
        })
    },
    fix: Fix::Manual {
        hint: "make the page size ({spec.decode.pageSize}, and {spec.prefill.pageSize}) divide the Mamba track \
               interval (256 unless extraArgs pass --mamba-track-interval), or pass --mamba-track-interval \
               with a multiple of the page size in each fleet's extraArgs",
    },
    ..Rule::DEFAULT
};

pub(super) const M6: Rule = Rule {
    id: "M6",
    about: "extra_buffer chunk size × page size",
    reproduces: "ServerArgs.mamba_cache_chunk_size, srt/server_args.py (0.5.17–0.5.18); \
                 mamba_cache_chunk_size, srt/arg_groups/overrides.py (0.5.19–0.5.23)",
    field: DECODE_PAGE_SIZE,
    roles: EVERY_SERVER,
    messages: &[text(
        "For SSM models, either chunk_size or page_size must be divisible by the other, got chunk_size={chunk}, \
         page_size={page}",
    )],
    check: |c| {
        // The extra-buffer validation sizes its cache chunks from the model's chunk size
        // (64 where its config class has none) and a page size given on the command line.
        if !c.layout.uses_ssm_state() {
            return None;
        }
        let chunk = c.layout.mamba_chunk_size.unwrap_or(FLA_CHUNK_SIZE);
        extra_buffer_fleets(c).find_map(|fleet| {
            let page = u64::try_from(fleet.page_size?).ok().filter(|page| *page > 0)?;
            let (small, large) = (chunk.min(page), chunk.max(page));
            when_with(small == 0 || large % small != 0, vec![("chunk", chunk.to_string()), ("page", page.to_string())])
        })
    },
    fix: Fix::Manual {
        hint: "use a page size ({spec.decode.pageSize}, and {spec.prefill.pageSize}) that divides the model's Mamba \
               chunk size or is a multiple of it (powers of two do for every default chunk size)",
    },
    ..Rule::DEFAULT
};

pub(super) const M7: Rule = Rule {
    id: "M7",
    about: "extra_buffer on a model or backend without it",
    reproduces: "ServerArgs._validate_mamba_extra_buffer, srt/server_args.py (0.5.17–0.5.18); \
                 validate_mamba_extra_buffer, srt/arg_groups/mamba_hook.py (0.5.19–0.5.23)",
    field: MAMBA_STRATEGY,
    roles: EVERY_SERVER,
    messages: &[text("extra_buffer is not supported for {architecture}; use no_buffer.")],
    check: |c| {
        let strategy = c.settings.mamba_radix_cache_strategy?;
        when_with(
            strategy != MambaRadixCacheStrategy::NoBuffer
                && c.layout.uses_ssm_state()
                && radix_cache_fleets(c).into_iter().any(|fleet| !extra_buffer_supported(c, fleet)),
            vec![("architecture", c.layout.architecture.clone())],
        )
    },
    fix: Fix::Rewrite {
        apply: strategy_unset,
        hint: "unset mambaRadixCacheStrategy (SGLang then picks no_buffer), and drop --linear-attn-backend from \
               extraArgs where it is not triton",
    },
    ..Rule::DEFAULT
};

pub(super) const M5: Rule = Rule {
    id: "M5",
    about: "no_buffer with the overlap schedule",
    reproduces: "ServerArgs._validate_mamba_no_buffer, srt/server_args.py (0.5.17–0.5.18); \
                 validate_mamba_no_buffer, srt/arg_groups/mamba_hook.py (0.5.19–0.5.23)",
    field: MAMBA_STRATEGY,
    roles: EVERY_SERVER,
    messages: &[text("no_buffer do not support overlap schedule. Try to set disable_overlap_schedule=True.")],
    // The overlap schedule is on unless --disable-overlap-schedule is given (in extraArgs: kvpilot
    // keeps no setting for it); SGLang's automatic strategy turns it off itself for no_buffer.
    check: |c| {
        let overlap_on =
            radix_cache_fleets(c).into_iter().any(|fleet| !given(&fleet.extra_args, "--disable-overlap-schedule"));
        when(
            c.layout.uses_ssm_state()
                && c.settings.mamba_radix_cache_strategy == Some(MambaRadixCacheStrategy::NoBuffer)
                && overlap_on,
        )
    },
    fix: Fix::Rewrite {
        apply: strategy_unset,
        hint: "leave mambaRadixCacheStrategy unset (SGLang's automatic choice turns the overlap schedule off \
               for no_buffer), or add --disable-overlap-schedule to the extraArgs of every fleet that keeps a \
               radix cache ({spec.prefill}, and {spec.decode} with decodeRadixCache)",
    },
    ..Rule::DEFAULT
};

pub(super) const M4: Rule = Rule {
    id: "M4",
    about: "extra-buffer strategy without Mamba state",
    reproduces: "handle_mamba_radix_cache, srt/arg_groups/model_hook.py (0.5.21–0.5.23)",
    field: MAMBA_STRATEGY,
    span: Span::since(v0_5(21)),
    roles: EVERY_SERVER,
    messages: &[text("--mamba-radix-cache-strategy {strategy} needs mamba state, got {architecture}.")],
    check: |c| {
        let strategy = c.settings.mamba_radix_cache_strategy?;
        let extra_buffer = strategy != MambaRadixCacheStrategy::NoBuffer;
        when_with(
            extra_buffer && radix_cache_in_use(c) && !c.layout.uses_ssm_state(),
            vec![("strategy", strategy.as_str().into()), ("architecture", c.layout.architecture.clone())],
        )
    },
    fix: Fix::Rewrite { apply: strategy_unset, hint: "unset mambaRadixCacheStrategy: the model keeps no Mamba state" },
    ..Rule::DEFAULT
};

pub(super) const M3: Rule = Rule {
    id: "M3",
    about: "no_buffer page size",
    reproduces: "ServerArgs._validate_mamba_no_buffer, srt/server_args.py (0.5.17–0.5.18); \
                 validate_mamba_no_buffer, srt/arg_groups/mamba_hook.py (0.5.19–0.5.23)",
    field: DECODE_PAGE_SIZE,
    roles: EVERY_SERVER,
    messages: &[text("no_buffer only supports page_size=1.")],
    // Unset, SGLang picks no_buffer where the model does not support extra_buffer (M7).
    check: |c| {
        when(
            c.layout.uses_ssm_state()
                && radix_cache_fleets(c)
                    .into_iter()
                    .any(|fleet| !runs_extra_buffer(c, fleet) && fleet.effective_page_size() != 1),
        )
    },
    fix: Fix::Manual {
        hint: "set {spec.decode.pageSize} (and {spec.prefill.pageSize}) to 1, or mambaRadixCacheStrategy to \
               extra_buffer where the model supports it",
    },
    ..Rule::DEFAULT
};

const MAMBA_STRATEGY: &str = "spec.disaggregation.mambaRadixCacheStrategy";

/// Whether a server in scope keeps a radix cache, where SGLang resolves and validates the Mamba
/// radix-cache strategy (`_mamba_radix_cache_resolution` returns early without one, 0.5.17-0.5.23).
fn radix_cache_in_use(c: &RuleInput<'_>) -> bool {
    !radix_cache_fleets(c).is_empty()
}

/// The architectures whose Mamba state SGLang's extra-buffer strategy supports
/// (`_MAMBA_EXTRA_BUFFER_ARCHS` in arg_groups/overrides.py), with the first release of each. From
/// 0.5.21 a linear-attention registry spec may opt in too; no release's spec does.
const MAMBA_EXTRA_BUFFER: &[(&str, Release)] = &[
    ("BailingMoeV2_5ForCausalLM", v0_5(17)),
    ("FalconH1ForCausalLM", v0_5(17)),
    ("GraniteMoeHybridForCausalLM", v0_5(17)),
    ("InternS2PreviewForConditionalGeneration", v0_5(17)),
    ("KimiK3ForConditionalGeneration", v0_5(17)),
    ("KimiLinearForCausalLM", v0_5(17)),
    ("MiniCPMV4_6ForConditionalGeneration", v0_5(17)),
    ("NemotronHForCausalLM", v0_5(17)),
    ("NemotronHPuzzleForCausalLM", v0_5(17)),
    ("Qwen3NextForCausalLM", v0_5(17)),
    ("Qwen3_5ForConditionalGeneration", v0_5(17)),
    ("Qwen3_5MoeForConditionalGeneration", v0_5(17)),
    ("BailingMoeV3ForCausalLM", v0_5(19)),
    ("Qwen3_5ForCausalLM", v0_5(19)),
    ("Qwen3_5MoeForCausalLM", v0_5(19)),
    ("Glm5NextForConditionalGeneration", v0_5(20)),
    ("NemotronH_Omni_Reasoning_V3", v0_5(20)),
    ("Qwen4ExpForConditionalGeneration", v0_5(20)),
    ("BailingMoeV3VLForConditionalGeneration", v0_5(21)),
    ("InklingForConditionalGeneration", v0_5(21)),
    ("InklingForConditionalGenerationMTP", v0_5(21)),
    ("MiniCPMV4_7ForConditionalGeneration", v0_5(23)),
];

/// SGLang's `supports_mamba_cache_extra_buffer` on a server of `fleet`: a listed architecture on
/// the triton linear-attention backend (`--linear-attn-backend`, triton unless given).
fn extra_buffer_supported(c: &RuleInput<'_>, fleet: &FleetSpec) -> bool {
    MAMBA_EXTRA_BUFFER.iter().any(|(arch, since)| *arch == c.layout.architecture && *since <= c.release)
        && option_value(&fleet.extra_args, "--linear-attn-backend").is_none_or(|backend| backend == "triton")
}

/// Whether a server of `fleet` runs the extra-buffer strategy: as set, or, unset, SGLang's
/// automatic choice: extra_buffer where it is supported and the overlap schedule is on (its
/// default) or pages are longer than 1 token; else no_buffer, with the overlap schedule off.
fn runs_extra_buffer(c: &RuleInput<'_>, fleet: &FleetSpec) -> bool {
    match c.settings.mamba_radix_cache_strategy {
        Some(strategy) => strategy != MambaRadixCacheStrategy::NoBuffer,
        None => {
            extra_buffer_supported(c, fleet)
                && (!given(&fleet.extra_args, "--disable-overlap-schedule") || fleet.effective_page_size() > 1)
        }
    }
}

/// The fleets in scope that keep a radix cache and run the extra-buffer strategy.
fn extra_buffer_fleets<'a>(c: &'a RuleInput<'_>) -> impl Iterator<Item = &'a FleetSpec> {
    radix_cache_fleets(c).into_iter().filter(|fleet| runs_extra_buffer(c, fleet))
}

/// The chunk size SGLang's extra-buffer Mamba cache takes where the config has none (the FLA
/// kernels' `CHUNK_SIZE`).
const FLA_CHUNK_SIZE: u64 = 64;

/// `--mamba-track-interval` among a server's arguments (kvpilot keeps no setting for it), else
/// SGLang's default, 256 in every release.
fn mamba_track_interval(args: &[String]) -> i64 {
    number_option(args, &["--mamba-track-interval"]).unwrap_or(256)
}

/// The fleets whose servers keep a radix cache ([`keeps_radix_cache`]) and so resolve the Mamba
/// strategy, by the arguments and page size they run with: a service's decode fleet and its
/// prefill servers (the fleet kvpilot runs, or, for prefill servers run elsewhere, the decode
/// fleet's arguments standing in for theirs); the one server the guard reads.
fn radix_cache_fleets<'a>(c: &RuleInput<'a>) -> Vec<&'a FleetSpec> {
    let servers = match c.subject {
        Subject::Service => vec![(c.decode, true), (c.prefill_fleet.unwrap_or(c.decode), false)],
        Subject::DecodeServer => vec![(c.decode, true)],
        Subject::OtherServer => vec![(c.decode, false)],
    };
    servers.into_iter().filter(|(fleet, decode)| keeps_radix_cache(c, fleet, *decode)).map(|(fleet, _)| fleet).collect()
}

/// SGLang's `uses_mamba_radix_cache`: an SSM-hybrid model whose server keeps a radix cache.
fn mamba_radix_cache(c: &RuleInput<'_>) -> bool {
    c.layout.uses_ssm_state() && radix_cache_in_use(c)
}

fn strategy_unset(s: &mut DisaggregationSpec) -> (String, String) {
    let from = s.mamba_radix_cache_strategy.map_or("unset", MambaRadixCacheStrategy::as_str).to_string();
    s.mamba_radix_cache_strategy = None;
    (from, "unset".into())
}

fn to_extra_buffer(s: &mut DisaggregationSpec) -> (String, String) {
    let from = s.mamba_radix_cache_strategy.map_or("unset", MambaRadixCacheStrategy::as_str).to_string();
    s.mamba_radix_cache_strategy = Some(MambaRadixCacheStrategy::ExtraBuffer);
    (from, MambaRadixCacheStrategy::ExtraBuffer.as_str().to_string())
}

#[cfg(test)]
mod tests {
    use crate::policy::test_support::*;

    /// SGLang resolves and validates the Mamba radix-cache strategy only where the server keeps a radix
    /// cache (`_mamba_radix_cache_resolution` returns early on `disable_radix_cache`): a decode server
    /// on its own, only with decode radix cache; a service, always, since its prefill servers keep
    /// theirs and run with its strategy. Before, kvpilot refused M1 and M3 on every decode server and
    /// M1 on models without Mamba state.
    #[test]
    fn m1_to_m5_mamba_strategies_where_the_radix_cache_runs() {
        let strategy = |strategy, radix| {
            with(move |s| {
                s.mamba_radix_cache_strategy = Some(strategy);
                s.decode_radix_cache = radix;
            })
        };
        let rules_on =
            |service: bool, patch, settings: &DisaggregationSpec, decode: &FleetSpec, layout: &AttentionLayout| {
                let input = PolicyInput::alone(settings, decode, layout, v0_5(patch));
                let verdict =
                    if service { evaluate(input) } else { evaluate_server(input, ServerRole::Decode, &SpecFields) };
                verdict.violations.into_iter().map(|v| (v.rule, v.message)).collect::<Vec<_>>()
            };
        let lazy =
            "extra_buffer_lazy unsupported under PD disaggregation; use --mamba-radix-cache-strategy extra_buffer.";
        let decode = FleetSpec::default();
        let overlap_off = vec!["--disable-overlap-schedule".to_string()];
        let paged = FleetSpec { page_size: Some(16), extra_args: overlap_off.clone(), ..FleetSpec::default() };
        let no_buffer = "no_buffer only supports page_size=1.";
        for radix in [false, true] {
            let lazy_settings = strategy(MambaRadixCacheStrategy::ExtraBufferLazy, radix);
            assert_eq!(rules_on(true, 21, &lazy_settings, &decode, &ssm()), [("M1", lazy.to_string())]);
            let alone = rules_on(false, 21, &lazy_settings, &decode, &ssm());
            assert_eq!(
                alone,
                if radix { vec![("M1", lazy.to_string())] } else { vec![] },
                "decode radix cache {radix}"
            );
            let no_buffer_settings = strategy(MambaRadixCacheStrategy::NoBuffer, radix);
            assert_eq!(rules_on(true, 21, &no_buffer_settings, &paged, &ssm()), [("M3", no_buffer.to_string())]);
            let alone = rules_on(false, 21, &no_buffer_settings, &paged, &ssm());
            assert_eq!(
                alone,
                if radix { vec![("M3", no_buffer.to_string())] } else { vec![] },
                "decode radix cache {radix}"
            );
        }
        // no_buffer needs the overlap schedule off, which SGLang's automatic strategy does itself (M5).
        let overlap = "no_buffer do not support overlap schedule. Try to set disable_overlap_schedule=True.";
        let no_buffer_settings = strategy(MambaRadixCacheStrategy::NoBuffer, true);
        assert_eq!(rules_on(false, 21, &no_buffer_settings, &decode, &ssm()), [("M5", overlap.to_string())]);
        let without_overlap = FleetSpec { extra_args: overlap_off, ..FleetSpec::default() };
        assert!(rules_on(false, 21, &no_buffer_settings, &without_overlap, &ssm()).is_empty());
        // The Mamba track interval (256, or --mamba-track-interval in extraArgs) must be a multiple of the
        // page size under extra_buffer, which is also SGLang's automatic choice (M2, a bare assert).
        let m2 = "AssertionError (assert view.mamba_track_interval % view.page_size == 0): --mamba-track-interval 256 \
                  is not a multiple of --page-size 192";
        let pages_192 = FleetSpec { page_size: Some(192), ..FleetSpec::default() };
        for chosen in [None, Some(MambaRadixCacheStrategy::ExtraBuffer)] {
            let settings = with(|s| s.mamba_radix_cache_strategy = chosen);
            assert_eq!(rules_on(true, 23, &settings, &pages_192, &ssm()), [("M2", m2.to_string())], "{chosen:?}");
            assert!(
                rules_on(false, 23, &settings, &pages_192, &ssm()).is_empty(),
                "no radix cache on this decode server"
            );
        }
        let interval_384 =
            FleetSpec { extra_args: vec!["--mamba-track-interval".into(), "384".into()], ..pages_192.clone() };
        assert!(rules_on(true, 23, &DisaggregationSpec::default(), &interval_384, &ssm()).is_empty());
        assert!(rules_on(true, 23, &DisaggregationSpec::default(), &pages_192, &full()).is_empty(), "no Mamba state");
        // The model's chunk size (64 where its config class has none) and the page size must divide one
        // another (M6): 48 divides the interval 96 but not 64.
        let m6 = "For SSM models, either chunk_size or page_size must be divisible by the other, got chunk_size=64, \
                  page_size=48";
        let interval_96 = FleetSpec {
            page_size: Some(48),
            extra_args: vec!["--mamba-track-interval".into(), "96".into()],
            ..FleetSpec::default()
        };
        assert_eq!(rules_on(true, 23, &DisaggregationSpec::default(), &interval_96, &ssm()), [("M6", m6.to_string())]);
        // An extra-buffer strategy on a model without Mamba state: refused from 0.5.21, ignored before.
        let extra = strategy(MambaRadixCacheStrategy::ExtraBuffer, false);
        let m4 = "--mamba-radix-cache-strategy extra_buffer needs mamba state, got LlamaForCausalLM.";
        assert_eq!(rules_on(true, 21, &extra, &decode, &full()), [("M4", m4.to_string())]);
        assert!(rules_on(true, 20, &extra, &decode, &full()).is_empty());
        assert!(rules_on(false, 23, &extra, &decode, &full()).is_empty(), "a decode server without its radix cache");
        let lazy_llama = strategy(MambaRadixCacheStrategy::ExtraBufferLazy, false);
        assert!(rules_on(true, 20, &lazy_llama, &decode, &full()).is_empty(), "M1 is about Mamba state");
        let rewritten =
            run_at(v0_5(23), &DisaggregationSpec { on_invalid: OnInvalid::Rewrite, ..extra }, &decode, &full());
        assert_eq!(rewritten.outcome, Outcome::Rewritten);
        assert_eq!((rewritten.rewrites[0].from.as_str(), rewritten.rewrites[0].to.as_str()), ("extra_buffer", "unset"));
    }

    /// A prefill server, or one without PD, given `--disable-radix-cache` keeps no radix cache, so
    /// SGLang resolves no Mamba strategy on it (`_mamba_radix_cache_resolution` returns early); a PD
    /// decode server's radix cache is decided by decode radix cache alone (the PD hook sets it over a
    /// given flag). Before, kvpilot reported the Mamba page-size rules on such a prefill server.
    #[test]
    fn mamba_rules_skip_servers_given_disable_radix_cache() {
        let no_buffer = with(|s| s.mamba_radix_cache_strategy = Some(MambaRadixCacheStrategy::NoBuffer));
        let ssm = ssm();
        let page_size = |extra: &[&str]| FleetSpec {
            page_size: Some(16),
            extra_args: ["--disable-overlap-schedule"].iter().chain(extra).map(|a| a.to_string()).collect(),
            ..FleetSpec::default()
        };
        let prefill = |fleet: &FleetSpec| {
            rule_ids(evaluate_other_server(PolicyInput::alone(&no_buffer, fleet, &ssm, v0_5(23)), true))
        };
        assert_eq!(prefill(&page_size(&[])), ["M3"]);
        assert!(prefill(&page_size(&["--disable-radix-cache"])).is_empty());
        // A service without decode radix cache whose prefill fleet turns its radix cache off.
        let service = |prefill_args: &[&str]| {
            let prefill_fleet = page_size(prefill_args);
            let decode = page_size(&[]);
            let input = PolicyInput::alone(&no_buffer, &decode, &ssm, v0_5(23)).with_prefill(Some(&prefill_fleet));
            rule_ids(evaluate(input))
        };
        assert_eq!(service(&[]), ["M3"]);
        assert!(service(&["--disable-radix-cache"]).is_empty());
        // On a decode server with decode radix cache the flag changes nothing.
        let radix = with(|s| {
            s.mamba_radix_cache_strategy = Some(MambaRadixCacheStrategy::NoBuffer);
            s.decode_radix_cache = true;
        });
        let decode = page_size(&["--disable-radix-cache"]);
        assert_eq!(
            rule_ids(evaluate_server(
                PolicyInput::alone(&radix, &decode, &ssm, v0_5(23)),
                ServerRole::Decode,
                &SpecFields
            )),
            ["M3"]
        );
    }

    #[test]
    fn m2_and_m5_read_the_extra_args_of_every_fleet_that_keeps_a_radix_cache() {
        let qwen_next = layout::resolve(
            &json!({
                "architectures": ["Qwen3NextForCausalLM"], "num_hidden_layers": 8, "full_attention_interval": 4,
                "head_dim": 256, "linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_key_head_dim": 128,
                "linear_value_head_dim": 128
            }),
            ResolveOptions::default(),
        )
        .unwrap();
        let overlap_off = FleetSpec { extra_args: vec!["--disable-overlap-schedule".into()], ..FleetSpec::default() };
        let overlap_on = FleetSpec::default();
        let no_buffer = |radix| {
            with(|s| {
                s.mamba_radix_cache_strategy = Some(MambaRadixCacheStrategy::NoBuffer);
                s.decode_radix_cache = radix;
            })
        };
        let rules = |settings: &DisaggregationSpec, decode: &FleetSpec, prefill: Option<&FleetSpec>| {
            let input = PolicyInput::of(settings, &qwen_next, v0_5(23)).with_decode(decode).with_prefill(prefill);
            evaluate(input).violations.into_iter().map(|v| v.rule).collect::<Vec<_>>()
        };
        // The prefill fleet keeps its radix cache: its own extraArgs decide M5 there.
        assert_eq!(rules(&no_buffer(false), &overlap_off, Some(&overlap_on)), ["M5"]);
        assert!(rules(&no_buffer(false), &overlap_on, Some(&overlap_off)).is_empty(), "decode keeps no radix cache");
        assert_eq!(rules(&no_buffer(true), &overlap_on, Some(&overlap_off)), ["M5"], "decode keeps one now");
        assert!(rules(&no_buffer(true), &overlap_off, Some(&overlap_off)).is_empty());
        // Prefill servers run elsewhere: the decode fleet's arguments stand in for theirs.
        assert_eq!(rules(&no_buffer(false), &overlap_on, None), ["M5"]);

        // M2: each fleet's page size against its own track interval.
        let paged = |page_size, interval: Option<&str>| FleetSpec {
            page_size: Some(page_size),
            extra_args: interval.map(|i| vec!["--mamba-track-interval".into(), i.into()]).unwrap_or_default(),
            ..FleetSpec::default()
        };
        let auto = DisaggregationSpec::default();
        assert!(
            rules(&auto, &paged(192, None), Some(&paged(192, Some("384")))).is_empty(),
            "decode keeps no radix cache"
        );
        assert_eq!(rules(&auto, &paged(192, Some("384")), Some(&paged(192, None))), ["M2"]);
        let radix = with(|s| s.decode_radix_cache = true);
        assert_eq!(rules(&radix, &paged(192, None), Some(&paged(192, Some("384")))), ["M2"]);
        assert!(rules(&radix, &paged(192, Some("384")), Some(&paged(192, Some("384")))).is_empty());
    }

    /// The extra-buffer strategy runs only on the architectures SGLang lists for it, on the triton
    /// linear-attention backend: set on another it is refused (M7), and unset SGLang picks no_buffer
    /// there, which takes pages of one token only (M3). Its cache chunks are the model's chunk size,
    /// which the page size must divide or be a multiple of (M6).
    #[test]
    fn m3_m6_m7_follow_where_sglang_runs_the_extra_buffer_and_the_model_s_chunk_size() {
        let lfm2 = fixture("parity/lfm2-1.2b");
        let nemotron = fixture("nemotron-nano-9b-v2");
        let legacy_chunk = fixture("parity/nemotron-h-legacy-chunk-size");
        assert_eq!(
            (nemotron.mamba_chunk_size, legacy_chunk.mamba_chunk_size, lfm2.mamba_chunk_size),
            (Some(256), Some(96), Some(1))
        );
        let rules = |settings: &DisaggregationSpec, decode: &FleetSpec, layout: &AttentionLayout| {
            run_at(v0_5(23), settings, decode, layout)
                .violations
                .into_iter()
                .map(|v| (v.rule, v.message))
                .collect::<Vec<_>>()
        };
        let extra = with(|s| s.mamba_radix_cache_strategy = Some(MambaRadixCacheStrategy::ExtraBuffer));
        let auto = DisaggregationSpec::default();
        let one_token = FleetSpec::default();
        assert_eq!(
            rules(&extra, &one_token, &lfm2),
            [("M7", "extra_buffer is not supported for Lfm2ForCausalLM; use no_buffer.".to_string())]
        );
        assert!(rules(&auto, &one_token, &lfm2).is_empty(), "unset: no_buffer, with the overlap schedule turned off");
        let paged = |page: i32, args: &[&str]| FleetSpec {
            page_size: Some(page),
            extra_args: args.iter().map(|a| a.to_string()).collect(),
            ..FleetSpec::default()
        };
        assert_eq!(rules(&auto, &paged(16, &[]), &lfm2), [("M3", "no_buffer only supports page_size=1.".to_string())]);
        assert!(rules(&auto, &paged(16, &[]), &nemotron).is_empty(), "extra_buffer where it is supported");
        let triton_off = paged(1, &["--linear-attn-backend", "cutedsl"]);
        assert_eq!(rules(&extra, &triton_off, &nemotron).iter().map(|(rule, _)| *rule).collect::<Vec<_>>(), ["M7"]);
        let chunk = |size: u64, page: i32| {
            format!(
                "For SSM models, either chunk_size or page_size must be divisible by the other, got chunk_size={size}, page_size={page}"
            )
        };
        let interval_96 = paged(48, &["--mamba-track-interval", "96"]);
        assert_eq!(rules(&auto, &interval_96, &nemotron), [("M6", chunk(256, 48))]);
        assert!(rules(&auto, &interval_96, &legacy_chunk).is_empty(), "96 is a multiple of 48");
        assert_eq!(rules(&auto, &paged(128, &[]), &legacy_chunk), [("M6", chunk(96, 128))]);
    }
}
