# Type stubs of nexus._native (python/bindings/*.cpp). The nexus package re-exports these and
# adds the blocking forms (Client.sft_step, predict, digest, dataset_sft_step) in __init__.py.
from typing import Any, Generator, Optional, Sequence

import numpy as np
import numpy.typing as npt

class AdapterSpec:
    rank: int  # 1..64; 0: none
    alpha: float  # scale alpha / rank; 0: = rank
    targets: int  # bits q 1, k 2, v 4, o 8, mlp_in 16, mlp_out 32; 0: all
    blocks: int  # bit i: encoder block i; 0: all
    def __init__(self, **fields: Any) -> None: ...

class HeadSpec:
    kind: str
    state_dim: int
    action_dim: int
    chunk: int
    hidden: int
    flow_steps: int
    flow_noise: float
    token_queries: int
    adapter: AdapterSpec
    def __init__(self, **fields: Any) -> None: ...

class OptimizerSpec:
    lr: float
    beta1: float
    beta2: float
    weight_decay: float
    grad_clip: float
    def __init__(self, **fields: Any) -> None: ...

class TenantSpec:
    views: int
    head: HeadSpec
    optimizer: OptimizerSpec
    seed: int
    def __init__(self, **fields: Any) -> None: ...

class BackboneInfo:
    name: str
    image_size: int
    max_views: int
    max_tokens: int
    feature_dim: int

class SlotDigest:
    parameters: int
    optimizer: int
    step: int
    latest_version: int

class SftResult:
    loss: float
    grad_norm: float
    step: int

class DigestResult:
    fnv1a: int
    bytes: int

class EnvSessions:
    ids: list[int]
    image_size: int
    state_dim: int
    action_dim: int
    max_steps: int

class EnvStepResult:
    reward: list[float]
    done: list[bool]       # terminated or truncated
    success: list[bool]
    failed: list[bool]
    truncated: list[bool]  # done by the episode limit: bootstrap from the state's value
    instructions: list[str]
    errors: list[str]
    engines: list[str]      # the rollout engine that served it ("": nexusd itself)
    interrupted: list[str]  # set: its engine was lost, the episode truncated; reset to go on

class DatasetInfo:
    episodes: int
    train_episodes: int
    valid_episodes: int
    samples: int
    state_dim: int
    action_dim: int
    layout: str
    views: list[str]
    state_keys: list[str]
    source_image_size: int
    normalized: bool
    action_mean: list[float]
    action_std: list[float]
    state_mean: list[float]
    state_std: list[float]

class RlOptions:
    algorithm: str
    task: str
    sessions: int
    horizon: int
    group_size: int
    iterations: int
    max_steps: int
    seed: int
    epochs: int
    minibatch: int
    clip: float
    gamma: float
    gae_lambda: float
    entropy: float
    value_lr: float
    max_staleness: int
    downweight_stale: bool
    queue_capacity: int
    demo_dataset: str  # a loaded dataset: DAPG's behaviour-cloning term
    demo_weight: float  # its weight, 0..100 (0: none)
    demo_batch: int  # demonstration steps per update
    synchronous: bool  # collect, update, collect with the new version: every record on-policy
    def __init__(self, **fields: Any) -> None: ...

class RlStatus:
    state: str
    error: str
    iterations: int
    version: int
    first_version: int
    env_steps: int
    episodes: int
    recent_success: float
    recent_return: float
    policy_loss: float
    value_loss: float
    entropy: float
    records_dropped: int
    records_downweighted: int
    seconds: float
    demo_loss: float
    records_behind: int  # records an older version had acted on (0 when synchronous)
    engine_steps: dict[str, int]  # steps per rollout engine ("": nexusd itself)
    interrupted_episodes: int     # cut short because their engine was lost

class JobSpec:
    kind: str
    dataset: str
    steps: int
    batch: int
    chunk: int
    task: str
    version: int
    episodes: int
    seed: int
    def __init__(self, **fields: Any) -> None: ...

class JobInfo:
    id: int
    tenant: str
    kind: str
    state: str
    error: str
    done: int
    total: int
    loss: float
    success_rate: float
    mean_return: float
    version: int
    seconds: float

class TenantStatus:
    name: str
    uid: int
    pid: int
    session_id: int
    segment_bytes: int
    requests: int
    errors: int
    attached_s: float

class TenantUsage:
    name: str
    train_s: float
    infer_s: float
    samples: int
    steps: int
    predictions: int
    env_steps: int
    train_wait_p50_us: float
    train_wait_p99_us: float
    infer_wait_p50_us: float
    infer_wait_p99_us: float
    weight: float
    attached: bool
    adapter: str

class DaemonStatus:
    daemon_version: str
    protocol_version: int
    pid: int
    uptime_s: float
    tenants: list[TenantStatus]
    message_bytes_copied: int
    tensor_bytes_copied: int
    backbone: str
    model_groups: int
    model_requests: int
    model_samples: int
    usage: list[TenantUsage]
    usage_wall_s: float
    training_busy_s: float
    inference_busy_s: float
    environment_busy_s: float
    jobs: list[JobInfo]
    inference_queued: int
    training_queued: int
    slots_resident: int
    slots_evicted: int
    env_sessions: int
    dataset_bytes: int
    rerun_groups: int
    longest_training_turn_s: float
    health_restarts: int
    health: list[str]

class Tensor:
    dtype: str
    shape: tuple[int, ...]
    offset: int
    nbytes: int
    def numpy(self) -> np.ndarray: ...
    def torch(self) -> Any: ...
    def __len__(self) -> int: ...

class SftFuture:
    request_id: int
    def done(self) -> bool: ...
    def result(self, timeout: Optional[float] = None) -> SftResult: ...
    def __await__(self) -> Generator[Any, None, SftResult]: ...

class PredictionFuture:
    request_id: int
    def done(self) -> bool: ...
    def result(self, timeout: Optional[float] = None) -> npt.NDArray[np.float32]: ...
    def __await__(self) -> Generator[Any, None, npt.NDArray[np.float32]]: ...

class DigestFuture:
    request_id: int
    def done(self) -> bool: ...
    def result(self, timeout: Optional[float] = None) -> DigestResult: ...
    def __await__(self) -> Generator[Any, None, DigestResult]: ...

class FeaturesResult:
    samples: int
    dim: int

class FeaturesFuture:
    request_id: int
    def done(self) -> bool: ...
    def result(self, timeout: Optional[float] = None) -> FeaturesResult: ...
    def __await__(self) -> Generator[Any, None, FeaturesResult]: ...

class Region:
    id: int
    nbytes: int
    device: int
    device_address: int
    def tensor(self, dtype: Any, shape: Sequence[int], offset: int) -> Tensor: ...

class Client:
    session_id: int
    tenant: str
    closed: bool
    @staticmethod
    def attach(tenant: str, socket_path: str = ..., ring_bytes: int = ..., client_arena_bytes: int = ...,
               output_arena_bytes: int = ..., wait: str = "adaptive", timeout: float = 10.0,
               block_when_full: bool = True) -> Client: ...
    def alloc(self, dtype: Any, shape: Sequence[int]) -> Tensor: ...
    def from_numpy(self, array: np.ndarray) -> Tensor: ...
    def close(self) -> None: ...
    def __enter__(self) -> Client: ...
    def __exit__(self, *args: Any) -> None: ...
    def register(self, spec: TenantSpec) -> BackboneInfo: ...
    def backbone(self) -> BackboneInfo: ...
    def sft_step_async(self, images: Tensor, tokens: Tensor, token_mask: Tensor, actions: Tensor,
                       state: Optional[Tensor] = None) -> SftFuture: ...
    def sft_step(self, images: Tensor, tokens: Tensor, token_mask: Tensor, actions: Tensor,
                 state: Optional[Tensor] = None) -> SftResult: ...
    def predict_async(self, images: Tensor, tokens: Tensor, token_mask: Tensor, state: Optional[Tensor] = None,
                      version: int = 0, dataset: str = "") -> PredictionFuture: ...
    def predict(self, images: Tensor, tokens: Tensor, token_mask: Tensor, state: Optional[Tensor] = None,
                version: int = 0, dataset: str = "") -> npt.NDArray[np.float32]: ...
    def features_async(self, images: Tensor, tokens: Tensor, token_mask: Tensor, out: Tensor) -> FeaturesFuture: ...
    def features(self, images: Tensor, tokens: Tensor, token_mask: Tensor, out: Tensor) -> FeaturesResult: ...
    def register_host_region(self, nbytes: int) -> Region: ...
    def register_device_region(self, nbytes: int, device: int = 0) -> Region: ...
    def unregister_region(self, region: Region) -> None: ...
    def publish(self) -> int: ...
    def slot_digest(self) -> SlotDigest: ...
    def save(self, tag: str) -> int: ...
    def load(self, tag: str) -> int: ...
    def digest_async(self, tensor: Tensor) -> DigestFuture: ...
    def digest(self, tensor: Tensor) -> DigestResult: ...
    def ping(self, payload: bytes) -> bytes: ...
    def dataset_load(self, name: str, path: str, seed: int = 0, views: Sequence[str] = ...,
                     state_keys: Sequence[str] = ..., normalize: bool = False, instruction: str = "") -> DatasetInfo: ...
    def dataset_sft_step_async(self, name: str, batch: int, chunk: int = 1) -> SftFuture: ...
    def dataset_sft_step(self, name: str, batch: int, chunk: int = 1) -> SftResult: ...
    def env_open(self, task: str, count: int, max_steps: int = 0) -> EnvSessions: ...
    def env_reset(self, ids: Sequence[int], seeds: Sequence[int], images: Tensor, state: Tensor) -> EnvStepResult: ...
    def env_step(self, ids: Sequence[int], actions: npt.ArrayLike, images: Tensor, state: Tensor) -> EnvStepResult: ...
    def env_close(self, ids: Sequence[int]) -> int: ...
    def rl_start(self, options: RlOptions) -> int: ...
    def rl_status(self, stop: bool = False) -> RlStatus: ...
    def job_start(self, spec: JobSpec) -> int: ...
    def job(self, id: int) -> JobInfo: ...
    def run_job(self, spec: JobSpec, poll: float = 0.5,
                timeout: Optional[float] = None) -> JobInfo: ...  # job_start, then job() until it ends
    def jobs(self) -> list[JobInfo]: ...
    def job_cancel(self, id: int) -> JobInfo: ...

class ExtConnection:
    def __init__(self, fd: int) -> None: ...
    def recv(self, timeout: float) -> tuple[Any, ...]: ...
    def send_spec(self, image_size: int, state_dim: int, action_dim: int, max_steps: int, error: str = "") -> bool: ...
    # Each item: (reward, done, success, image | None, state | None, instruction, error,
    # bad_input, truncated), one per session the request named, in its order.
    def send_observations(self, observations: list[tuple[Any, ...]]) -> bool: ...

def error_codes() -> dict[str, int]: ...
def tokenize(text: str, tokens: Tensor, token_mask: Tensor, row: int) -> None: ...
def fnv1a(buffer: Any) -> int: ...
def query_status(socket_path: str = ..., timeout: float = 5.0, usage_since_s: float = 0.0) -> DaemonStatus: ...
def query_metrics(socket_path: str = ..., timeout: float = 5.0) -> str: ...
def release_tenant(socket_path: str, tenant: str, timeout: float = 5.0) -> None: ...
def cancel_job(socket_path: str, job: int, timeout: float = 5.0) -> str: ...

class synth:
    class SceneObject:
        color: int
        shape: int
        x: float
        y: float
    class Scene:
        image: npt.NDArray[np.uint8]
        objects: list[synth.SceneObject]
        target: int
        instruction: str
    class SceneGenerator:
        def __init__(self, seed: int, image_size: int = 64, objects: int = 3, object_radius: int = 5,
                     varied_phrasing: bool = True) -> None: ...
        def next(self) -> synth.Scene: ...
    @staticmethod
    def reach_actions(scene: synth.Scene, chunk: int) -> npt.NDArray[np.float32]: ...
