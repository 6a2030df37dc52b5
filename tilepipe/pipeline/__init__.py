"""The pipeline layer, what a kernel author writes roles with: rings of full/empty mbarrier pairs and the tile
pipelines built on them, the storage declarations that size and allocate them, the warp_specialize that checks their
protocols while tracing, and the probes of debug and trace modes. The only layer with barrier, phase or cross-CTA
flag arithmetic."""

from tilepipe.pipeline.epilogue import EpiLoadPipeline, LoadOrderBarrier
from tilepipe.pipeline.output import OutputTilePipeline
from tilepipe.pipeline.probe import Probe
from tilepipe.pipeline.ring import ConsumerStage, ProducerConsumerPipeline, ProducerStage
from tilepipe.pipeline.roles import warp_specialize
from tilepipe.pipeline.storage import SmemPlan
from tilepipe.pipeline.tiles import InputTilePipeline

__all__ = ["ConsumerStage", "EpiLoadPipeline", "InputTilePipeline", "LoadOrderBarrier", "OutputTilePipeline", "Probe",
           "ProducerConsumerPipeline", "ProducerStage", "SmemPlan", "warp_specialize"]
