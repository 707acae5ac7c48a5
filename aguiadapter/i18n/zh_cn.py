"""简体中文消息：与英文目录的 id 和占位符一一对应。"""

from __future__ import annotations

MESSAGES: dict[str, str] = {
    # 错误码的默认消息（aguiadapter.errors.ErrorCode）。
    "bad_request": "请求不是合法的 HTTP 请求。",
    "bad_request_body": "无法读取请求体：其 Content-Encoding 或分块传输编码已损坏。",
    "unauthorized": "缺少 Bearer 令牌，或令牌无效。",
    "unauthorized_token_expired": "Bearer 令牌已过期，请重新获取。",
    "forbidden": "不允许从该来源发出此请求。",
    "forbidden_host": (
        "此服务器在这里只接受回环主机名（localhost、127.0.0.1、[::1]）；其他主机名请用 --allowed-host 添加。"
    ),
    "forbidden_origin": "不允许来自该源的网页调用此服务器；请用 --allowed-origin 列出该源。",
    "too_many_runs": "您同时进行的 run 已达上限，请等其中一个结束后再试。",
    "too_many_threads": "您新建会话（thread）的次数已达当前上限，请在 Retry-After 秒后重试。",
    "too_many_reattaches": "您同时打开的重新连接（re-attach）流已达上限，请关闭其中一个或稍后重试。",
    "server_busy": "服务器同时进行的 run 已达上限，请稍后重试。",
    "server_busy_bodies": "服务器同时读取的请求体已达上限，请稍后重试。",
    "body_too_slow": "请求体到达过慢（须在 10 秒内送达，或平均每秒至少 64 KiB），请重新发送。",
    "unsupported_media_type": "请求体必须以 application/json 格式发送。",
    "request_too_large": "请求体过大。",
    "invalid_json": "请求体不是合法的 JSON。",
    "invalid_json_unicode": "请求体中含有无效的 Unicode 文本（未配对的代理项转义）。",
    "invalid_json_number": "请求体不是合法的 JSON：NaN、Infinity 以及超出双精度浮点数范围的数字都不属于 JSON。",
    "invalid_json_encoding": "请求体必须是 UTF-8 编码的 JSON。",
    "invalid_input": "AG-UI RunAgentInput 请求格式无效。",
    "not_found": "未找到请求的资源。",
    "method_not_allowed": "此处不允许使用该方法；Allow 响应头列出了允许的方法。",
    "uri_too_long": "请求的 URL 过长。",
    "headers_too_large": "请求头过大。",
    "duplicate_run_id": "该 run ID 已用于相同的请求。",
    "run_id_conflict": "该 run ID 已在此会话中用于另一个不同的请求。",
    "run_id_conflict_resume": (
        "该 Resume 复用了它所答复的、已被中断的 run 的 run ID。Resume 是一个新的 run："
        "请使用新的 runId 发送（threadId 和 rosInvocationId 保持不变）。CopilotKit 1.74 及更早版本"
        "会复用 run ID，请在其 runtime 中加入 adapter 的 CopilotKit 指南（docs/front-ends.md）中的 resume 中间件。"
    ),
    "thread_busy": "此会话已有正在进行的 run，请稍后再试。",
    "thread_binding_conflict": "此会话已绑定到其他工作目录或用户。",
    "resume_required": "此会话正在等待对中断的答复，请发送 Resume 请求。",
    "incomplete_resume": "Resume 必须对每个待处理的中断恰好答复一次。",
    "unknown_interrupt": (
        "Resume 引用的中断不存在或已不在等待答复（该会话当前不在等待任何答复，"
        "可用 GET /threads/{{threadId}} 查看它在等待什么）。"
    ),
    "resume_payload_invalid": "Resume 缺少 payload，或 payload 不符合该中断要求的格式。",
    "resume_already_applied": "该中断的答复已经生效，无需重复提交。",
    "execution_expired": "该中断已过期。",
    "execution_lost": "该执行已无法恢复。",
    "execution_not_found": "未找到该执行。",
    "invalid_event_cursor": "Last-Event-ID（或 ?after=）必须是该 run 的事件 id。",
    "thread_not_found": "未找到该 thread。",
    "run_not_found": "未知的 run，或其事件已超过回放保留时间。",
    "events_truncated": "该游标之后的事件已不再完整保留，请改为读取 thread 状态。",
    "server_draining": "该服务器正在关闭，请在其他副本上重试。",
    "state_persistence_failed": "无法可靠地保存恢复所需的状态。",
    "state_store_unavailable": "会话状态存储暂时不可用，请稍后重试。",
    "a2a_unavailable": "Agent 运行时当前不可用。",
    "a2a_unauthorized": "Agent 运行时拒绝了本服务器的凭据，需由运维人员修正其令牌。",
    "a2a_protocol_error": "Agent 运行时返回的响应前后不一致。",
    "a2a_execution_failed": "Agent 运行失败。",
    "cancelled": "该执行已取消。",
    "internal_error": "服务器内部错误。",
    "service_unavailable": "服务器正在启动或关闭，请稍后重试。",
    # 请求 envelope。
    "input_not_object": "请求体必须是一个 JSON 对象。",
    "input_field_missing": "缺少必填字段 {path}。",
    "input_unknown_field": "不支持的字段 {path}。",
    "input_expected_string": "{path} 必须是字符串。",
    "input_expected_integer": "{path} 必须是整数。",
    "input_expected_boolean": "{path} 必须是 true 或 false。",
    "input_expected_object": "{path} 必须是 JSON 对象。",
    "input_expected_array": "{path} 必须是数组。",
    "input_expected_string_or_array": "{path} 必须是字符串或数组。",
    "input_string_empty": "{path} 不能为空。",
    "input_string_too_long": "{path} 最多只能包含 {max_length} 个字符。",
    "input_integer_not_positive": "{path} 必须是正整数。",
    "input_bad_value": "{path} 的取值必须是以下之一：{allowed}。",
    "input_invalid_value": "{path} 的值无效。",
    "input_credential_not_ascii": (
        "{path} 只能包含可打印的 ASCII 字符（不能含其他字符或控制字符），因为它要通过 HTTP 请求头传递。"
    ),
    "input_credential_too_long": (
        "{path} 超过 {max_length} 个字符：凭证通过 HTTP 请求头传递，请求头最多只能容纳几 KiB。"
    ),
    "input_region_id_invalid": "{path} 必须是形如 cn-hangzhou 的地域 ID：仅含小写字母、数字和连字符，最多 63 个字符。",
    "input_tools_unsupported": "{path}：暂不支持客户端自定义工具，请传空数组。",
    "input_user_message_required": "发起新的 run 时，{path} 中必须包含一条用户消息。",
    "input_user_id_not_principal": "{path} 必须省略，或与已认证的用户一致。",
    # 由 thread service 抛出（不带 path）：缺少最新的用户消息，或该消息已在之前的 run 中发送过。
    "new_run_requires_user_message": "发起新的 run 时，messages 中必须包含一条新的用户消息。",
    # 用户消息内容。
    "input_user_content_empty": "{path} 为空：用户消息至少需要包含文字或图片。",
    "input_user_content_type": "{path} 必须是字符串或内容片段数组。",
    "input_user_content_unusable": (
        "{path} 中没有本服务可用的内容（将被跳过：{skipped}）；请发送文本或内联的 PNG、JPEG、GIF、WebP 图片。"
    ),
    "input_content_part_unsupported": "{path}：不支持 {value} 类型的内容，请发送文本或内联图片。",
    "input_image_source_unsupported": (
        "{path}：图片必须以 base64 数据内联发送，不接受 {value} 类型的来源。"
    ),
    "input_image_type_unsupported": (
        "{path}：不支持 {mime_type} 格式的图片，请使用 PNG、JPEG、GIF 或 WebP。"
    ),
    "input_image_bad_base64": "{path} 不是合法的 base64 编码。",
    "input_image_content_mismatch": "{path} 的内容不是有效的 {mime_type} 图片。",
    "input_image_damaged": "{path} 不是完整的 {mime_type} 图片：数据被截断或已损坏。",
    "input_image_unreadable": "{path} 不是可以读取的 {mime_type} 图片。",
    "input_image_too_many_pixels": "{path}：图片超过 {limit_mpx} 百万像素。",
    "input_image_too_large": "{path}：图片解码后超过 {limit_mib} MiB。",
    "input_images_total_too_large": "{path}：同一条消息中的图片合计不能超过 {limit_mib} MiB。",
    # 工作目录。
    "input_cwd_not_absolute": "{path} 必须是绝对路径，且不能包含“..”。",
    "input_cwd_outside_roots": "{path} 不在允许的工作区目录范围内。",
    "input_cwd_not_directory": "{path} 已存在，但不是目录。",
    "input_cwd_below_file": "{path} 位于一个文件之下：它的某一级上级不是目录。",
    "input_cwd_symlink_loop": "{path} 无法解析：其中的符号链接构成了循环。",
    "input_cwd_too_long": "{path} 超过 {limit} 字节（UTF-8）。",
    "input_cwd_name_too_long": "{path} 中有一级名称超过 {limit} 字节（UTF-8）。",
    "input_cwd_inaccessible": "服务器无权访问 {path}（权限不足）。",
    # Resume（由 Resume 校验和 thread service 抛出）。
    "session_lost": "运行时已不再保存此会话的 session，无法恢复。",
    "resume_duplicate_ids": "Resume 对同一个中断答复了不止一次。",
    "resume_payload_missing": "对中断 {id} 的答复缺少 payload。",
    "resume_payload_schema": "对中断 {id} 的答复不符合其 responseSchema。",
    "unknown_interrupt_pending": "Resume 答复的中断 {id} 不在等待答复；正在等待答复的中断 ID 为：{pending}。",
    "resume_payload_allowed": "对中断 {id} 的答复中，{field} 只能是以下值之一：{allowed}。",
    "resume_payload_required": "对中断 {id} 的答复缺少 {field}。",
    "resume_payload_unknown_field": (
        "对中断 {id} 的答复中，{field} 含有 responseSchema 未定义的字段（可用字段：{allowed}）。"
    ),
    "resume_payload_type": "对中断 {id} 的答复中，{field} 的类型必须是 {type}。",
    "resume_payload_field": "对中断 {id} 的答复中，{field} 不符合其 responseSchema。",
    "resume_identity_mismatch": "Resume 与被中断的执行不匹配（rosInvocationId 不同）。",
    # POST /connect (the hydrate run of a reloaded page).
    "connect_resume_refused": "{path}：connect 不答复任何中断；请把答复作为 resume 发送到 POST /。",
    "connect_history_unavailable": (
        "暂时无法从 agent 运行时读取对话内容；thread 本身完好，其等待处理的内容已恢复。请稍后重试以查看消息。"
    ),
    "connect_history_gone": (
        "agent 运行时已不再保存该会话（运行时已重启）；thread 本身完好，其等待处理的内容已恢复。"
        "下一轮对话之后即可再次看到消息。"
    ),
    "connect_history_pipeline": (
        "该 thread 运行的是 pipeline，agent 运行时不保存其对话；pipeline 的视图和等待处理的内容已恢复。"
    ),
    # 会话历史（GET /threads/{threadId}/messages）。
    "history_unavailable": (
        "暂时无法从 agent 运行时读取会话内容（运行时已重启、不可用，或不保存会话记录）；请在 Retry-After 秒后重试。"
        "thread 本身完好：GET /threads/{{threadId}} 仍会显示其状态和待处理的中断。"
    ),
    "history_pipeline": (
        "该 thread 运行的是 pipeline，agent 运行时不会把 pipeline 的对话写入会话记录；"
        "请通过 GET /threads/{{threadId}} 和 pipeline 事件查看其进度。"
    ),
    "history_gone": (
        "agent 运行时已不再保存该会话（运行时已重启，或不保存会话记录）：重试无济于事，"
        "该 thread 的下一轮对话之后即可再次读取。"
        "thread 本身完好：GET /threads/{{threadId}} 仍会显示其状态和待处理的中断。"
    ),
    "history_busy": "同时读取的会话过多；请在 Retry-After 秒后重试。",
    "history_too_large": (
        "该 thread 的对话超过了本服务器一次读取的上限（--history-max-bytes）；"
        "GET /threads/{{threadId}} 仍会显示其状态和待处理的中断。"
    ),
    "invalid_history_limit": "limit 必须是 1 到 {max} 之间的整数（按轮次计）。",
    "invalid_history_cursor": "before 必须是本接口返回的游标（上一页的 before）。",
    # GET /threads（线程列表）。
    "thread_list_bad_limit": "limit 必须是 1 到 {most} 之间的整数。",
    "thread_list_bad_cursor": "cursor 必须原样使用先前 GET /threads 应答中的 nextCursor。",
    "thread_list_bad_state": "state 必须是 {states} 中的一个或多个，以逗号分隔。",
    "thread_list_bad_user_id": "userId 不能为空，也不能超过 1024 个字符。",
    "thread_list_user_id_required": (
        "使用共享令牌时不识别用户：请用 ?userId= 指明要列出谁的线程（即其 run 发送的 userId）。"
    ),
}
