#!/usr/bin/env python3
"""Turn ppdiffuse's knobs while it plays.

  pipelines/live-control.py [--camera DEV|test] [--loopback DEV|none]
                            [--model MODEL] [--prompt TEXT | --prompt-embeds F]
                            [--period S] [--similarity T]
  pipelines/live-control.py --test

Runs the pipeline of pipelines/webcam-obs.sh (webcam -> ppdiffuse ->
v4l2loopback, for OBS) and every --period seconds turns one knob of the
running element, printing each change with the element's counters:

  builtin:anisotropic (the default model): the model's parameters, set as
      model="builtin:anisotropic?kappa=K&lambda=L"; the element takes a new
      URI while PLAYING when only its parameters change.
  a diffusers pipeline directory: strength.  A pipeline needs a prompt:
      --prompt TEXT (a blend "a:0.7|b:0.3" too) or --prompt-embeds FILE
      (make-tiny writes DIR/prompt_embeds.npy).

--camera test plays videotestsrc instead of a camera, --loopback none
sends the output to fakesink: the knobs can be tried without devices.
Stop with Ctrl-C (the pipeline is drained first, as gst-launch -e does).

--test runs videotestsrc (live, a still picture) ! ppdiffuse
model=builtin:stamp ! fakesink for a few seconds, turns similarity-threshold
from 0 to 0.98 while it plays, and exits 0 when frames came out before and
after the change, none was skipped before it and some were after it;
otherwise it prints what went wrong and exits 1.

Needs PyGObject and GStreamer's introspection data (Debian: python3-gi,
gir1.2-gstreamer-1.0).  Uninstalled builds need GST_PLUGIN_PATH_1_0 and
PPDIFFUSE_WORKER, and root needs OMPI_ALLOW_RUN_AS_ROOT=1 and
OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 (README.md).
"""

import argparse
import itertools
import os
import signal
import sys

import gi

gi.require_version("Gst", "1.0")
from gi.repository import GLib, Gst  # noqa: E402

# The live pipeline: that of pipelines/webcam-obs.sh (the model is set
# apart: a path or a URI with '&' needs no quoting then).
LIVE_PIPELINE = (
    "{source}"
    " ! videoconvert ! videoscale"
    " ! video/x-raw,format=YUY2,width=640,height=480"
    " ! queue max-size-buffers=2 max-size-bytes=0 max-size-time=0"
    " ! ppdiffuse name=pp ranks=2 steps=4 similarity-threshold={similarity}"
    " ! {sink}"
)
# --camera test, --loopback none: no devices needed.
TEST_SOURCE = "videotestsrc is-live=true pattern=ball"
NO_SINK = "fakesink"
# builtin:anisotropic's parameters to cycle through: (kappa, lambda), kappa
# in pixel levels (default 24), lambda the step size (0..0.25).
ANISOTROPIC_SETTINGS = [(24, 0.25), (8, 0.25), (60, 0.2), (120, 0.1)]
STRENGTHS = [0.5, 0.3, 0.7, 0.9]
ANISOTROPIC = "builtin:anisotropic"

# --test: a still picture, small and quick, through a 2-worker mesh.
TEST_PIPELINE = (
    "videotestsrc is-live=true pattern=smpte"
    " ! video/x-raw,format=RGBx,width=64,height=48,framerate=30/1"
    " ! ppdiffuse name=pp ranks=2 steps=2 model=builtin:stamp"
    " ! fakesink sync=false"
)
TEST_THRESHOLD = 0.98
# Frames to see out before and after the change.
TEST_FRAMES = 15
# Everything, mesh start included, within this.
TEST_DEADLINE_S = 90
POLL_MS = 100


def stats(element):
    """The element's counters, as a dict."""
    s = element.get_property("stats")
    names = ("frames-in", "frames-out", "skipped-similar", "dropped-leaky",
             "dropped-qos")
    out = {}
    for name in names:
        ok, value = s.get_uint64(name)
        if ok:
            out[name] = value
    return out


def format_stats(counters):
    return " ".join(f"{k}={v}" for k, v in counters.items())


class Runner:
    """A pipeline on a main loop that ends on error, EOS or quit()."""

    def __init__(self, description):
        self.pipeline = Gst.parse_launch(description)
        self.element = self.pipeline.get_by_name("pp")
        self.loop = GLib.MainLoop()
        self.error = None
        bus = self.pipeline.get_bus()
        bus.add_signal_watch()
        bus.connect("message::error", self._on_error)
        bus.connect("message::eos", lambda *_: self.loop.quit())

    def _on_error(self, _bus, message):
        err, debug = message.parse_error()
        self.error = f"{err.message} ({debug})"
        self.loop.quit()

    def run(self):
        if self.pipeline.set_state(Gst.State.PLAYING) == \
                Gst.StateChangeReturn.FAILURE:
            # The reason is on the bus, not yet dispatched.
            message = self.pipeline.get_bus().pop_filtered(
                Gst.MessageType.ERROR)
            if message is not None:
                self._on_error(None, message)
            self.error = self.error or "the pipeline did not start"
        else:
            self.loop.run()
        self.pipeline.set_state(Gst.State.NULL)
        return self.error


def run_test():
    """--test: exit status 0 when turning similarity-threshold worked."""
    runner = Runner(TEST_PIPELINE)
    state = {"phase": "before", "before": None, "result": None}

    def poll():
        counters = stats(runner.element)
        if state["phase"] == "before" and \
                counters["frames-out"] >= TEST_FRAMES:
            state["before"] = counters
            runner.element.set_property("similarity-threshold",
                                        TEST_THRESHOLD)
            print(f"similarity-threshold -> {TEST_THRESHOLD} "
                  f"({format_stats(counters)})", flush=True)
            state["phase"] = "after"
        elif state["phase"] == "after" and counters["frames-out"] >= \
                state["before"]["frames-out"] + TEST_FRAMES:
            state["result"] = counters
            runner.loop.quit()
            return False
        return True

    def give_up():
        runner.error = runner.error or (
            f"fewer than {TEST_FRAMES} frames out in the {state['phase']} "
            f"phase within {TEST_DEADLINE_S} s")
        runner.loop.quit()
        return False

    GLib.timeout_add(POLL_MS, poll)
    GLib.timeout_add_seconds(TEST_DEADLINE_S, give_up)
    error = runner.run()
    if error is None and state["result"] is None:
        error = "the pipeline ended early"
    if error is not None:
        print(f"live-control --test: {error}", file=sys.stderr)
        return 1
    before, after = state["before"], state["result"]
    print(f"after the change: {format_stats(after)}", flush=True)
    if before["skipped-similar"] != 0:
        print("live-control --test: frames were skipped while the filter "
              "was off", file=sys.stderr)
        return 1
    if after["skipped-similar"] == 0:
        print("live-control --test: a still picture skipped no frame at "
              f"similarity-threshold={TEST_THRESHOLD}", file=sys.stderr)
        return 1
    return 0


def knob_turns(model):
    """(property, value, label) to set in turn, for ever."""
    if model.split("?")[0] == ANISOTROPIC:
        for kappa, lam in itertools.cycle(ANISOTROPIC_SETTINGS):
            uri = f"{ANISOTROPIC}?kappa={kappa}&lambda={lam}"
            yield "model", uri, f"model={uri}"
    elif os.path.isdir(model):
        for strength in itertools.cycle(STRENGTHS):
            yield "strength", strength, f"strength={strength}"
    else:
        sys.exit(f"live-control: no knob to turn for model '{model}': use "
                 f"{ANISOTROPIC} or a diffusers pipeline directory")


def run_live(args):
    source = TEST_SOURCE if args.camera == "test" \
        else f"v4l2src device={args.camera}"
    sink = NO_SINK if args.loopback == "none" \
        else f"v4l2sink device={args.loopback} sync=false"
    description = LIVE_PIPELINE.format(source=source, sink=sink,
                                       similarity=args.similarity)
    runner = Runner(description)
    runner.element.set_property("model", args.model)
    if args.prompt is not None:
        runner.element.set_property("prompt", args.prompt)
    if args.prompt_embeds is not None:
        runner.element.set_property("prompt-embeds", args.prompt_embeds)
    turns = knob_turns(args.model)

    def turn():
        prop, value, label = next(turns)
        runner.element.set_property(prop, value)
        print(f"{label}  ({format_stats(stats(runner.element))})",
              flush=True)
        return True

    def interrupt():
        # As gst-launch -e: EOS drains the frames still in the mesh.
        print("draining", flush=True)
        runner.pipeline.send_event(Gst.Event.new_eos())
        return False

    GLib.timeout_add_seconds(args.period, turn)
    GLib.unix_signal_add(GLib.PRIORITY_DEFAULT, signal.SIGINT, interrupt)
    print(f"playing: {description} (model={args.model})", flush=True)
    error = runner.run()
    if error is not None:
        print(f"live-control: {error}", file=sys.stderr)
        return 1
    return 0


def main():
    parser = argparse.ArgumentParser(
        description="Turn ppdiffuse's knobs while it plays.")
    parser.add_argument("--test", action="store_true",
                        help="self-test on videotestsrc and fakesink")
    parser.add_argument("--camera", default="/dev/video0",
                        help="V4L2 device, or 'test' for videotestsrc")
    parser.add_argument("--loopback", default="/dev/video10",
                        help="v4l2loopback device, or 'none' for fakesink")
    parser.add_argument("--model", default=ANISOTROPIC,
                        help="builtin:anisotropic (default) or a diffusers "
                        "pipeline directory")
    prompt = parser.add_mutually_exclusive_group()
    prompt.add_argument("--prompt",
                        help="text prompt of a pipeline directory model")
    prompt.add_argument("--prompt-embeds",
                        help="prompt embeddings (.npy) of a pipeline "
                        "directory model")
    parser.add_argument("--period", type=int, default=5,
                        help="seconds between knob turns (default 5)")
    parser.add_argument("--similarity", type=float, default=0.98,
                        help="similarity-threshold (default 0.98, 0 = off)")
    args = parser.parse_args()
    Gst.init(None)
    return run_test() if args.test else run_live(args)


if __name__ == "__main__":
    sys.exit(main())
