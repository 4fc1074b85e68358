#!/usr/bin/env python3
"""Run docs/models.md's recipes ("From a download to a running pipeline")
on tiny stand-ins with the layout each recipe downloads.

Usage: check-models-recipes.py SOURCE_ROOT PPDIFFUSE_TOOL

For every `huggingface-cli download REPO --local-dir /models/NAME FILES…`
in the section, a stand-in of REPO (ppdiffuse-tool make-tiny, its weights
under the names the download has, the download's scheduler) is made under
a scratch /models, holding exactly FILES.  A file a recipe names that no
download makes (a community checkpoint) is a stand-in from tests/data.
For every block after a
"<!-- recipe: NAME -->" line, the ppdiffuse element's settings (from
"ppdiffuse " to the next " ! ") are run with /models/ pointing at the
stand-ins, between videotestsrc (the camera) and a file: every frame must
come out.  Exits non-zero naming the recipe, the file or the setting at
fault.
"""

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

SECTION = "## From a download to a running pipeline"
RECIPE = re.compile(r"<!-- recipe: ([\w-]+) -->")
MODELS = "/models/"
FRAMES = 2
WIDTH, HEIGHT = 64, 48
LIMIT_S = 240

# What each repository's stand-in is made of: make-tiny kind, then edits.
STAND_INS = {
    "stabilityai/sd-turbo": ("turbo", "kl-vae", None),
    "madebyollin/taesd": ("taesd", None, None),
    "stable-diffusion-v1-5/stable-diffusion-v1-5": ("sd15", "kl-vae",
                                                    "PNDMScheduler"),
    "latent-consistency/lcm-lora-sdv1-5": ("lora", None, None),
}
# Files a recipe names that no download makes (a community checkpoint):
# a stand-in from tests/data, of the architecture of the download the
# recipe takes its config= from.
FILE_STAND_INS = {
    "my-sd15-model.safetensors": os.path.join("tests", "data", "single-file",
                                              "sd15-tiny.safetensors"),
}
# diffusers' half-precision file names, which the downloads carry.
FP16_NAMES = {
    "diffusion_pytorch_model.safetensors":
        "diffusion_pytorch_model.fp16.safetensors",
    "model.safetensors": "model.fp16.safetensors",
}


def fail(msg):
    print("check-models-recipes: " + msg, file=sys.stderr)
    sys.exit(1)


def section(text):
    if SECTION not in text:
        fail("docs/models.md has no section '%s'" % SECTION)
    body = text.split(SECTION, 1)[1]
    return body.split("\n## ", 1)[0]


def code_blocks(body):
    """(preceding recipe name or None, block text joined at '\\')."""
    out = []
    lines = body.split("\n")
    i = 0
    name = None
    while i < len(lines):
        m = RECIPE.match(lines[i].strip())
        if m:
            name = m.group(1)
        elif lines[i].startswith("```"):
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            block = "\n".join(lines[i + 1:j]).replace("\\\n", " ")
            out.append((name, block))
            name = None
            i = j
        i += 1
    return out


def tool(tool_path, *args):
    subprocess.run([tool_path] + list(args), check=True,
                   stdout=subprocess.DEVNULL, timeout=LIMIT_S)


def make_stand_in(tool_path, repo, local_dir, files, scratch):
    if repo not in STAND_INS:
        fail("no stand-in for %s: add one to STAND_INS" % repo)
    kind, vae, scheduler = STAND_INS[repo]
    full = os.path.join(scratch, "full-" + os.path.basename(local_dir))
    tool(tool_path, "make-tiny", "--kind", kind, "--out", full, "--seed",
         "3")
    if vae == "kl-vae":
        # as downloaded: the full VAE in vae/
        shutil.rmtree(os.path.join(full, "vae"))
        tool(tool_path, "make-tiny", "--kind", "vae-kl", "--out",
             os.path.join(full, "vae"), "--seed", "4")
    if scheduler is not None:
        path = os.path.join(full, "scheduler", "scheduler_config.json")
        with open(path) as f:
            text = f.read()
        text = re.sub(r'"_class_name" *: *"[A-Za-z]+"',
                      '"_class_name": "%s"' % scheduler, text)
        with open(path, "w") as f:
            f.write(text)
    for wanted in files:
        src = os.path.join(full, wanted)
        if not os.path.exists(src):
            base = os.path.basename(wanted)
            plain = [k for k, v in FP16_NAMES.items() if v == base]
            if plain:
                src = os.path.join(os.path.dirname(src), plain[0])
        if not os.path.exists(src):
            fail("%s: the stand-in of %s has no %s" % (local_dir, repo,
                                                       wanted))
        dst = os.path.join(local_dir, wanted)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copyfile(src, dst)


def downloads(blocks, models):
    made = []
    for name, block in blocks:
        for line in block.split("\n"):
            words = shlex.split(line)
            if words[:2] != ["huggingface-cli", "download"]:
                continue
            repo = words[2]
            rest = words[3:]
            if "--local-dir" not in rest:
                fail("%s: a download without --local-dir" % repo)
            k = rest.index("--local-dir")
            local = rest[k + 1]
            files = rest[:k] + rest[k + 2:]
            if not local.startswith(MODELS) or not files:
                fail("%s: expected --local-dir /models/NAME and files" % repo)
            made.append((repo, os.path.join(models, local[len(MODELS):]),
                         files))
    return made


def element_settings(block, models):
    m = re.search(r"! ppdiffuse (.*?) !", block, re.S)
    if m is None:
        fail("a recipe without a ppdiffuse element: %s" % block)
    settings = []
    for word in shlex.split(m.group(1)):
        key, _, value = word.partition("=")
        settings.append("%s=%s" % (key, value.replace(MODELS,
                                                      models + "/")))
    return settings


def main():
    if len(sys.argv) != 3:
        fail("usage: check-models-recipes.py SOURCE_ROOT PPDIFFUSE_TOOL")
    root, tool_path = sys.argv[1:]
    with open(os.path.join(root, "docs", "models.md")) as f:
        blocks = code_blocks(section(f.read()))
    recipes = [(n, b) for n, b in blocks if n is not None]
    if not recipes:
        fail("docs/models.md names no recipes")
    scratch = tempfile.mkdtemp(prefix="recipes-")
    try:
        models = os.path.join(scratch, "models")
        stand_ins = downloads(blocks, models)
        for repo, local, files in stand_ins:
            make_stand_in(tool_path, repo, local, files, scratch)
        for name, block in recipes:
            for f in re.findall(re.escape(MODELS) + r"([\w.-]+\.safetensors)",
                                block):
                dst = os.path.join(models, f)
                if os.path.exists(dst):
                    continue
                if f not in FILE_STAND_INS:
                    fail("recipe %s names /models/%s, which no download "
                         "makes: add a stand-in to FILE_STAND_INS" % (name, f))
                shutil.copyfile(os.path.join(root, FILE_STAND_INS[f]), dst)
        print("stand-ins: %s" % ", ".join(r for r, _, _ in stand_ins))
        for name, block in recipes:
            settings = element_settings(block, models)
            out = os.path.join(scratch, name + ".rgb")
            cmd = ["gst-launch-1.0", "-q", "videotestsrc",
                   "num-buffers=%d" % FRAMES, "pattern=ball", "!",
                   "video/x-raw,format=RGB,width=%d,height=%d" % (WIDTH,
                                                                  HEIGHT),
                   "!", "ppdiffuse"] + settings + [
                   "!", "videoconvert", "!", "video/x-raw,format=RGB", "!",
                   "filesink", "location=" + out]
            r = subprocess.run(cmd, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, timeout=LIMIT_S)
            if r.returncode != 0:
                fail("recipe %s failed (%s):\n%s" % (
                    name, " ".join(settings), r.stdout.decode(errors="replace")))
            size = os.path.getsize(out)
            if size != FRAMES * WIDTH * HEIGHT * 3:
                fail("recipe %s: %d bytes came out, %d frames of %dx%d RGB "
                     "expected" % (name, size, FRAMES, WIDTH, HEIGHT))
            print("recipe %s: %d frames through %s" % (name, FRAMES,
                                                       " ".join(settings)))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
