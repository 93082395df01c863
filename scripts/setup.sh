#!/usr/bin/env bash
# One idempotent set-up for a fresh machine that has only python3 (>= 3.10), a JDK 17 and Maven:
#   1. .venv/                   created with `python3 -m venv` when missing
#   2. pip install -e '.[dev]'  when pyproject.toml changed since the last install
#   3. .cache/jars/{spark,kafka,kafka-tools,hdfs-test} copied from Maven Central when
#      jvm/<side>/pom.xml changed; while pip installs (both wait mostly on the network)
#   4. .cache/jars/router/router-state.jar built by Maven from jvm/state (its pom pins pyspark's
#      jar versions), when a source file, the pom or the pyspark version changed
#   5. .cache/jars/hdfs-test-main/router-hdfs-test.jar: the tests' HDFS (jvm/hdfs-test/src), likewise
#   6. .cache/class-archive/driver.jsa: the driver JVM's class archive, recorded by a short run of
#      the router (streaming.devtools.class_archive), when a jar of its classpath or the JDK changed;
#      ROUTER_CLASS_ARCHIVE=off skips it
# Each step leaves a stamp (the sha256 of its input) in .cache/stamps/; a second run does nothing
# and says so. ROUTER_CACHE_DIR moves the cache (jars and stamps) elsewhere; PYTHON picks the
# interpreter that creates the venv.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${ROUTER_CACHE_DIR:-$ROOT/.cache}"
[[ "$CACHE" == /* ]] || CACHE="$PWD/$CACHE"  # mvn would read a relative one from jvm/<side>/
STAMPS="$CACHE/stamps"
VENV="$ROOT/.venv"
PYTHON="${PYTHON:-python3}"
did_something=0

say() { printf 'setup: %s\n' "$*"; }
die() {
    printf 'setup: error: %s\n' "$*" >&2
    # The jars' copy, when it is still running in the background (3).
    if [[ -n "${jars_pid:-}" ]]; then pkill -P "$jars_pid" 2>/dev/null || true; kill "$jars_pid" 2>/dev/null || true; fi
    exit 1
}

need() {
    command -v "$1" >/dev/null 2>&1 || die "expected \`$1\` on PATH ($2)"
}

digest() { sha256sum "$1" | cut -d' ' -f1; }

# stamp_is_current NAME INPUT: true when the stamp holds INPUT's current digest.
stamp_is_current() {
    [[ -f "$STAMPS/$1" ]] && [[ "$(cat "$STAMPS/$1")" == "$(digest "$2")" ]]
}

write_stamp() {
    mkdir -p "$STAMPS"
    digest "$2" >"$STAMPS/$1"
}

need "$PYTHON" "Python 3.10 or newer, to create .venv"
need java "a JDK 17, to run Spark and the embedded Kafka broker"
need mvn "Maven, to copy the Kafka and Spark jars from Maven Central and build jvm/state"
need javac "a JDK 17 (javac), to compile the tests' HDFS launcher"
need jar "a JDK 17 (jar), to package the tests' HDFS launcher"
cd "$ROOT"

# 1. The virtualenv.
if [[ ! -x "$VENV/bin/python" ]]; then
    say "creating .venv with $("$PYTHON" --version 2>&1)"
    "$PYTHON" -m venv "$VENV"
    rm -f "$STAMPS/pip"
    did_something=1
fi

# 3. Jars: copied into a fresh folder, swapped in whole, so no jar of an older pom is left behind.
# One Maven at a time (Maven's local repository is not safe for two writers), in the background
# while pip installs (2): its lines go to a log, shown once pip is done.
copy_jars() {
    for side in spark kafka kafka-tools hdfs-test; do
        pom="jvm/$side/pom.xml"
        target="$CACHE/jars/$side"
        if stamp_is_current "jars-$side" "$pom" && compgen -G "$target/*.jar" >/dev/null; then
            continue
        fi
        if [[ -f "$STAMPS/jars-$side" ]]; then why="$pom changed"; else why="first copy"; fi
        say "copying the $side jars from Maven Central ($why) into $target"
        started=$SECONDS
        rm -rf "$target.tmp"
        if ! mvn -q -B -f "$pom" dependency:copy-dependencies -Djars.dir="$target.tmp" \
            >"$CACHE/mvn-$side.log" 2>&1; then
            cat "$CACHE/mvn-$side.log" >&2
            die "mvn could not copy the $side jars (log above, also in $CACHE/mvn-$side.log)"
        fi
        rm -rf "$target"
        mv "$target.tmp" "$target"
        write_stamp "jars-$side" "$pom"
        say "$(find "$target" -name '*.jar' | wc -l) $side jars in $((SECONDS - started)) s"
    done
}
mkdir -p "$CACHE"
jars_log="$CACHE/jars-copy.log"
copy_jars >"$jars_log" 2>&1 &
jars_pid=$!

# 2. Python dependencies, the `streaming` package (editable) and the `router` command.
if ! stamp_is_current pip pyproject.toml || [[ ! -x "$VENV/bin/router" ]]; then
    if [[ -f "$STAMPS/pip" ]]; then why="pyproject.toml changed"; else why="first install"; fi
    say "installing Python dependencies: pip install -e '.[dev]' ($why)"
    mkdir -p "$CACHE"
    # pip's own chatter goes to a log, shown only when it fails.
    if ! { "$VENV/bin/python" -m pip install --disable-pip-version-check --upgrade pip \
        && "$VENV/bin/python" -m pip install --disable-pip-version-check -e '.[dev]'; } \
        >"$CACHE/pip-install.log" 2>&1; then
        cat "$CACHE/pip-install.log" >&2
        die "pip install failed (log above, also in $CACHE/pip-install.log)"
    fi
    write_stamp pip pyproject.toml
    did_something=1
fi

# The jars pyspark ships: the classpath the tests' HDFS compiles against (5) and the start of the
# driver's (6).
pyspark_jars="$("$VENV/bin/python" -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')"

# The jars' copy (3), started before pip.
copy_status=0
wait "$jars_pid" || copy_status=$?
jars_pid=""  # ended: a later `die` has nothing to stop
if [[ $copy_status -ne 0 ]]; then
    cat "$jars_log" >&2
    die "the jars could not be copied (log above, also in $jars_log)"
fi
if [[ -s "$jars_log" ]]; then
    cat "$jars_log"
    did_something=1
fi

# 4. The router's JVM classes (the state processor, the batch plan, the Kafka write), built by Maven
# (jvm/state/pom.xml) against the versions of the installed pyspark's jars, so that they match the
# Spark they run in.
state_input="$CACHE/state-input.txt"
mkdir -p "$CACHE"
{ find jvm/state/src -name '*.java' | sort | xargs sha256sum; sha256sum jvm/state/pom.xml; "$VENV/bin/python" -c 'import pyspark; print(pyspark.__version__)'; } >"$state_input"
state_jar="$CACHE/jars/router/router-state.jar"
if ! stamp_is_current jars-router "$state_input" || [[ ! -f "$state_jar" ]]; then
    say "building the state processor (mvn -f jvm/state/pom.xml package) into $state_jar"
    started=$SECONDS
    built="$CACHE/state-jar"
    rm -rf "$built"
    mkdir -p "$(dirname "$state_jar")"
    if ! mvn -q -B -f jvm/state/pom.xml package -Dmaven.test.skip=true -Drouter.jar.dir="$built" \
        >"$CACHE/mvn-state.log" 2>&1; then
        cat "$CACHE/mvn-state.log" >&2
        die "mvn could not build jvm/state (log above, also in $CACHE/mvn-state.log)"
    fi
    mv "$built/router-state.jar" "$state_jar"
    rm -rf "$built"
    write_stamp jars-router "$state_input"
    say "state processor built in $((SECONDS - started)) s"
    did_something=1
fi

# 5. The tests' HDFS (router.hdfs.MiniHdfs, a MiniDFSCluster in a JVM of its own), in a jar of its
# own: test code, kept off the router's classpath.
hdfs_input="$CACHE/hdfs-test-input.txt"
{ find jvm/hdfs-test/src -name '*.java' | sort | xargs sha256sum; sha256sum jvm/hdfs-test/pom.xml; } >"$hdfs_input"
hdfs_jar="$CACHE/jars/hdfs-test-main/router-hdfs-test.jar"
if ! stamp_is_current jars-hdfs-test-main "$hdfs_input" || [[ ! -f "$hdfs_jar" ]]; then
    say "compiling the tests' HDFS (jvm/hdfs-test) into $hdfs_jar"
    classes="$CACHE/hdfs-test-classes"
    rm -rf "$classes"
    mkdir -p "$classes" "$(dirname "$hdfs_jar")"
    # Every lint but [path]: pyspark's jars name, in their manifests, jars that pyspark does not ship.
    if ! javac -Xlint:all,-path -Werror --release 17 -d "$classes" \
        -cp "$pyspark_jars/*:$CACHE/jars/hdfs-test/*" \
        $(find jvm/hdfs-test/src -name '*.java' | sort) >"$CACHE/javac-hdfs-test.log" 2>&1; then
        cat "$CACHE/javac-hdfs-test.log" >&2
        die "javac could not compile jvm/hdfs-test (log above, also in $CACHE/javac-hdfs-test.log)"
    fi
    jar --create --file "$hdfs_jar.tmp" -C "$classes" .
    mv "$hdfs_jar.tmp" "$hdfs_jar"
    rm -rf "$classes"
    write_stamp jars-hdfs-test-main "$hdfs_input"
    did_something=1
fi

# 6. The driver JVM's class archive: the classes a short run of the router loads, mapped by later
# driver JVMs at start instead of being found and verified jar after jar (the first message is
# routed about 3 s sooner; streaming.spark.session.archive_options). It holds its classpath, so it
# is recorded again when any jar on it, or the JDK, changed.
if [[ "${ROUTER_CLASS_ARCHIVE:-}" != "off" ]]; then
    archive_input="$CACHE/class-archive-input.txt"
    { find "$pyspark_jars" "$CACHE/jars/spark" "$CACHE/jars/router" -name '*.jar' -printf '%p %s %T@\n' | sort
      java -version 2>&1; } >"$archive_input"
    archive="$CACHE/class-archive/driver.jsa"
    if ! stamp_is_current class-archive "$archive_input" || [[ ! -f "$archive" ]]; then
        say "recording the driver's class archive (a short run of the router on a temporary broker)"
        if ! ROUTER_CACHE_DIR="$CACHE" "$VENV/bin/python" -m streaming.devtools.class_archive --out "$archive" \
            >"$CACHE/class-archive.log" 2>&1; then
            cat "$CACHE/class-archive.log" >&2
            die "the class archive could not be recorded (log above, also in $CACHE/class-archive.log)"
        fi
        write_stamp class-archive "$archive_input"
        say "$(tail -n 1 "$CACHE/class-archive.log")"
        did_something=1
    fi
fi

if [[ $did_something -eq 0 ]]; then
    say "nothing to do: .venv, Python dependencies and jars are up to date"
else
    say "done"
fi
