//! `METAFORGE_AGENT_LOOP`: the deployment's loop setting, parsed strictly.

use metaforge_agent::{AGENT_LOOP_ENV, LoopMode, LoopModeError};

#[test]
fn the_loop_setting_accepts_auto_native_and_react_and_defaults_to_auto() {
    assert_eq!(AGENT_LOOP_ENV, "METAFORGE_AGENT_LOOP");
    for (value, mode) in [
        (None, LoopMode::Auto),
        (Some(""), LoopMode::Auto),
        (Some("auto"), LoopMode::Auto),
        (Some("native"), LoopMode::Native),
        (Some(" React "), LoopMode::React),
        (Some("NATIVE"), LoopMode::Native),
    ] {
        assert_eq!(LoopMode::parse_setting(value), Ok(mode), "{value:?}");
    }
    for mode in [LoopMode::Auto, LoopMode::Native, LoopMode::React] {
        assert_eq!(mode.as_str().parse::<LoopMode>(), Ok(mode));
    }
}

#[test]
fn a_bad_loop_setting_names_the_variable_and_the_accepted_values() {
    let err = LoopMode::parse_setting(Some("json")).unwrap_err();
    assert_eq!(
        err,
        LoopModeError {
            value: "json".to_owned()
        }
    );
    let text = err.to_string();
    for needle in ["METAFORGE_AGENT_LOOP", "\"json\"", "auto", "native", "react"] {
        assert!(text.contains(needle), "{text} lacks {needle}");
    }
}
