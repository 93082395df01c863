"""bench.profile: each CPU sample is put in the router step its thread and stack belong to."""

from __future__ import annotations

import pytest

from bench.profile import PASS_THROUGH_STEPS, STEPS, Profile, by_step, step_of

TASK = "Executor task launch worker for task 1.0 in stage 7.0 (TID 12)"
MAP = ["java.lang.Thread.run", "org.apache.spark.scheduler.ShuffleMapTask.runTask"]
RESULT = [
    "java.lang.Thread.run",
    "org.apache.spark.sql.kafka010.KafkaWriteTask.execute",
    "org.apache.spark.sql.catalyst.expressions.GeneratedClass$GeneratedIteratorForCodegenStage2.processNext",
]
SCAN = "router.spark.DecisionPass$Scan"
"""The decision's pass over a partition's rows."""
PROCESSOR = "router.spark.ConversationState$Processor"
"""The state processor Spark runs for each key."""
PULL = [
    f"{SCAN}.hasNext",
    "scala.collection.convert.JavaCollectionWrappers$IteratorWrapper.hasNext",
]
STATE = ["org.apache.spark.sql.execution.streaming.TransformWithStateExec.processNewData"]
STEP = [f"{PROCESSOR}.handleInputRows", f"{PROCESSOR}.step"]


@pytest.mark.parametrize(
    ("thread", "frames", "step"),
    [
        (TASK, [*MAP, "org.apache.spark.sql.kafka010.consumer.KafkaDataConsumer.get"], "read"),
        (TASK, [*MAP, "org.apache.spark.sql.avro.AvroDataToCatalyst.nullSafeEval"], "decode"),
        (TASK, [*MAP, "router.avro.TrailingBytes.call"], "decode"),
        (TASK, [*MAP, "org.apache.spark.sql.catalyst.expressions.JsonToStructs.nullSafeEval"], "choices"),
        (TASK, [*MAP, "org.apache.spark.shuffle.sort.BypassMergeSortShuffleWriter.write"], "shuffle"),
        (TASK, [*RESULT, f"{SCAN}.next", f"{SCAN}.decide"], "decision"),
        (
            TASK,
            [*RESULT, f"{SCAN}.next", "router.spark.Headers.add", "java.util.Arrays.copyOf"],
            "decision",
        ),
        (TASK, [*RESULT, *PULL, *STATE, *STEP, "router.state.ConversationMemory.step"], "memory: processor"),
        (TASK, [*RESULT, *PULL, *STATE, *STEP, "org.rocksdb.RocksDB.get"], "memory: state store"),
        # K2 kept at once: the processor decides the message a first time, in its own pass.
        (
            TASK,
            [
                *RESULT,
                *PULL,
                *STATE,
                *STEP,
                f"{PROCESSOR}.keepsChoice",
                "router.spark.ProcessorPass.choose",
                "router.rules.PassMemory.decide",
                "router.rules.Engine.decide",
            ],
            "memory: K2 pass",
        ),
        (
            TASK,
            [
                *RESULT,
                *PULL,
                *STATE,
                "org.apache.spark.sql.execution.streaming.state.RocksDBStateStore.commit",
            ],
            "memory: state store",
        ),
        (
            TASK,
            [
                *RESULT,
                *PULL,
                *STATE,
                *STEP,
                "org.apache.spark.sql.catalyst.expressions.GeneratedClass$SpecificSafeProjection.apply",
            ],
            "memory: rows",
        ),
        (
            TASK,
            [
                *RESULT,
                *PULL,
                "org.apache.spark.util.collection.unsafe.sort.UnsafeExternalSorter.insertRecord",
            ],
            "memory: rows",
        ),
        (
            TASK,
            [
                *RESULT,
                "org.apache.spark.sql.kafka010.KafkaRowWriter.sendRow",
                "org.apache.kafka.clients.producer.KafkaProducer.send",
            ],
            "producer",
        ),
        (TASK, [*RESULT, "org.apache.spark.sql.catalyst.expressions.codegen.UnsafeWriter.write"], "output"),
        # The state processor's input read and sorted by key before the decision's pass pulls a row.
        (
            TASK,
            [
                *RESULT,
                "org.apache.spark.sql.execution.streaming.state.StateStoreRDD.compute",
                *STATE,
                "org.apache.spark.sql.execution.UnsafeExternalRowSorter.sort",
            ],
            "memory: rows",
        ),
        (
            TASK,
            [
                *RESULT,
                "org.apache.spark.sql.execution.streaming.state.StateStoreRDD.compute",
                "org.apache.spark.sql.execution.streaming.state.StateStoreChangelogWriter.<init>",
            ],
            "memory: state store",
        ),
        # A call from the Python driver: building the query, running a batch's job.
        (
            "Thread-3",
            [
                "java.lang.Thread.run",
                "py4j.ClientServerConnection.run",
                "py4j.commands.CallCommand.execute",
                "org.apache.spark.sql.Dataset.select",
            ],
            "driver",
        ),
        (
            "kafka-producer-network-thread | producer-1",
            ["org.apache.kafka.clients.producer.internals.Sender.run"],
            "producer",
        ),
        (
            "stream execution thread for router-i1 [id = 1]",
            ["org.apache.spark.sql.execution.QueryExecution.toRdd"],
            "driver",
        ),
        ("spark-listener-group-appStatus", ["org.apache.spark.scheduler.AsyncEventQueue.dispatch"], "other"),
    ],
)
def test_a_sample_goes_to_the_step_its_stack_is_in(thread: str, frames: list[str], step: str) -> None:
    assert step_of(thread, frames) == step


def test_folded_stacks_add_up_by_step_and_the_pass_through_share_is_its_steps() -> None:
    folded = {
        f"{TASK}|{';'.join([*MAP, 'org.apache.spark.sql.kafka010.consumer.KafkaDataConsumer.get'])}": 3,
        f"{TASK}|{';'.join([*RESULT, f'{SCAN}.decide'])}": 4,
        f"{TASK}|{';'.join([*RESULT, f'{SCAN}.utf8'])}": 1,
        "kafka-producer-network-thread | producer-3|org.apache.kafka.clients.NetworkClient.poll": 2,
        "Thread-3|": 10,
    }
    samples = by_step(folded)
    assert list(samples) == [name for name, _ in STEPS]
    assert (
        samples["read"] == 3
        and samples["decision"] == 5
        and samples["producer"] == 2
        and samples["other"] == 10
    )
    profile = Profile(samples, rate=1000.0)
    assert profile.total == 20
    assert profile.pass_through_share() == pytest.approx(5 / 20)
    assert set(PASS_THROUGH_STEPS) <= set(samples)
