#define WP_NO_BFLOAT16

#define WP_TILE_BLOCK_DIM 1
#define WP_NO_CRT
#include "builtin.h"
#include "deterministic.h"

#define builtin_tid1d() wp::linear_tid<wp_linear_tid>(task_index, dim)
#define builtin_tid2d(x, y) wp::tid(x, y, task_index, dim)
#define builtin_tid3d(x, y, z) wp::tid(x, y, z, task_index, dim)
#define builtin_tid4d(x, y, z, w) wp::tid(x, y, z, w, task_index, dim)

#define builtin_block_dim() wp::block_dim()


// avoid namespacing of float type for casting to float type, this is to avoid wp::float(x), which is not valid in C++
#define float(x) cast_float(x)
#define adj_float(x, adj_x, adj_ret) adj_cast_float(x, adj_x, adj_ret)

#define int(x) cast_int(x)
#define adj_int(x, adj_x, adj_ret) adj_cast_int(x, adj_x, adj_ret)

struct wp_args_lift_3770de84 {
    wp::array_t<wp::vec_t<3, wp::float32>> points;
    wp::float32 dz;
};


template <bool wp_linear_contiguous>
static void lift_3770de84_cpu_kernel_forward(
    wp::launch_bounds_t<1> dim,
    size_t task_index,
    wp_args_lift_3770de84 *_wp_args)
{
    static constexpr bool wp_linear_tid = wp_linear_contiguous;
    wp_args_lift_3770de84 wp_contiguous_args;
    if constexpr (wp_linear_contiguous)
    {
        wp_contiguous_args = *_wp_args;
        wp_contiguous_args.points.strides[0] = sizeof(wp::vec_t<3, wp::float32>);
        _wp_args = &wp_contiguous_args;
    }
    //---------
    // argument vars
    wp::array_t<wp::vec_t<3, wp::float32>> var_points = _wp_args->points;
    wp::float32 var_dz = _wp_args->dz;
    //---------
    // primal vars
    wp::int32 var_0;
    wp::vec_t<3, wp::float32>* var_1;
    const wp::float32 var_2 = 0.0;
    const wp::float32 var_3 = 0.0;
    wp::vec_t<3, wp::float32> var_4;
    wp::vec_t<3, wp::float32> var_5;
    wp::vec_t<3, wp::float32> var_6;
    //---------
    // forward
    // def lift(points: wp.array(dtype=wp.vec3), dz: float):                                  <L 11>
    // i = wp.tid()                                                                           <L 12>
    var_0 = builtin_tid1d();
    // points[i] = points[i] + wp.vec3(0.0, 0.0, dz)                                          <L 13>
    var_1 = wp::address(var_points, var_0);
    var_4 = wp::vec_t<3, wp::float32>(var_2, var_3, var_dz);
    var_6 = wp::load(var_1);
    var_5 = wp::add(var_6, var_4);
    wp::array_store(var_points, var_0, var_5);
}



template <bool wp_linear_contiguous>
static void lift_3770de84_cpu_kernel_backward(
    wp::launch_bounds_t<1> dim,
    size_t task_index,
    wp_args_lift_3770de84 *_wp_args,
    wp_args_lift_3770de84 *_wp_adj_args)
{
    static constexpr bool wp_linear_tid = wp_linear_contiguous;
    wp_args_lift_3770de84 wp_contiguous_args;
    wp_args_lift_3770de84 wp_contiguous_adj_args;
    if constexpr (wp_linear_contiguous)
    {
        wp_contiguous_args = *_wp_args;
        wp_contiguous_adj_args = *_wp_adj_args;
        wp_contiguous_args.points.strides[0] = sizeof(wp::vec_t<3, wp::float32>);
        wp_contiguous_adj_args.points.strides[0] = sizeof(wp::vec_t<3, wp::float32>);
        _wp_args = &wp_contiguous_args;
        _wp_adj_args = &wp_contiguous_adj_args;
    }
    //---------
    // argument vars
    wp::array_t<wp::vec_t<3, wp::float32>> var_points = _wp_args->points;
    wp::float32 var_dz = _wp_args->dz;
    wp::array_t<wp::vec_t<3, wp::float32>> adj_points = _wp_adj_args->points;
    wp::float32 adj_dz = _wp_adj_args->dz;
    //---------
    // primal vars
    wp::int32 var_0;
    wp::vec_t<3, wp::float32>* var_1;
    const wp::float32 var_2 = 0.0;
    const wp::float32 var_3 = 0.0;
    wp::vec_t<3, wp::float32> var_4;
    wp::vec_t<3, wp::float32> var_5;
    wp::vec_t<3, wp::float32> var_6;
    //---------
    // dual vars
    wp::int32 adj_0 = {};
    wp::vec_t<3, wp::float32> adj_1 = {};
    wp::float32 adj_2 = {};
    wp::float32 adj_3 = {};
    wp::vec_t<3, wp::float32> adj_4 = {};
    wp::vec_t<3, wp::float32> adj_5 = {};
    wp::vec_t<3, wp::float32> adj_6 = {};
    //---------
    // forward
    // def lift(points: wp.array(dtype=wp.vec3), dz: float):                                  <L 11>
    // i = wp.tid()                                                                           <L 12>
    var_0 = builtin_tid1d();
    // points[i] = points[i] + wp.vec3(0.0, 0.0, dz)                                          <L 13>
    var_1 = wp::address(var_points, var_0);
    var_4 = wp::vec_t<3, wp::float32>(var_2, var_3, var_dz);
    var_6 = wp::load(var_1);
    var_5 = wp::add(var_6, var_4);
    // wp::array_store(var_points, var_0, var_5);
    //---------
    // reverse
    wp::adj_array_store(var_points, var_0, var_5, adj_points, adj_0, adj_5);
    wp::adj_add(var_6, var_4, adj_1, adj_4, adj_5);
    wp::adj_vec_t(var_2, var_3, var_dz, adj_2, adj_3, adj_dz, adj_4);
    wp::adj_address(var_points, var_0, adj_points, adj_0, adj_1);
    // adj: points[i] = points[i] + wp.vec3(0.0, 0.0, dz)                                     <L 13>
    // adj: i = wp.tid()                                                                      <L 12>
    // adj: def lift(points: wp.array(dtype=wp.vec3), dz: float):                             <L 11>
    return;
}



template <bool wp_linear_contiguous>
static WP_FORCEINLINE void lift_3770de84_cpu_forward_tasks(
    wp::launch_bounds_t<1> *dim,
    wp_args_lift_3770de84 *_wp_args)
{
    for (size_t task_index = 0; task_index < dim->size; ++task_index)
    {
        lift_3770de84_cpu_kernel_forward<wp_linear_contiguous>(*dim, task_index, _wp_args);
    }
}

static WP_FORCEINLINE void lift_3770de84_cpu_forward_dispatch(
    wp::launch_bounds_t<1> *dim,
    wp_args_lift_3770de84 *_wp_args)
{
    wp::tile_shared_storage_t tile_mem;
#if defined(WP_ENABLE_TILES_IN_STACK_MEMORY)
    wp::shared_tile_storage = &tile_mem;
#endif

    const bool wp_linear_contiguous = dim->coord_mult == 1 && ((_wp_args->points.strides[0] == (int)sizeof(wp::vec_t<3, wp::float32>)));
    if (wp_linear_contiguous)
        lift_3770de84_cpu_forward_tasks<true>(dim, _wp_args);
    else
        lift_3770de84_cpu_forward_tasks<false>(dim, _wp_args);
}

extern "C" {

// Python CPU entry points
WP_API void lift_3770de84_cpu_forward(
    wp::launch_bounds_t<1> *dim,
    wp_args_lift_3770de84 *_wp_args)
{
    lift_3770de84_cpu_forward_dispatch(dim, _wp_args);
}

} // extern C



template <bool wp_linear_contiguous>
static WP_FORCEINLINE void lift_3770de84_cpu_backward_tasks(
    wp::launch_bounds_t<1> *dim,
    wp_args_lift_3770de84 *_wp_args,
    wp_args_lift_3770de84 *_wp_adj_args)
{
    for (size_t task_index = 0; task_index < dim->size; ++task_index)
    {
        lift_3770de84_cpu_kernel_backward<wp_linear_contiguous>(
            *dim, task_index, _wp_args, _wp_adj_args);
    }
}

static WP_FORCEINLINE void lift_3770de84_cpu_backward_dispatch(
    wp::launch_bounds_t<1> *dim,
    wp_args_lift_3770de84 *_wp_args,
    wp_args_lift_3770de84 *_wp_adj_args)
{
    wp::tile_shared_storage_t tile_mem;
#if defined(WP_ENABLE_TILES_IN_STACK_MEMORY)
    wp::shared_tile_storage = &tile_mem;
#endif

    const bool wp_linear_contiguous = dim->coord_mult == 1 && ((_wp_args->points.strides[0] == (int)sizeof(wp::vec_t<3, wp::float32>)) & (_wp_adj_args->points.strides[0] == (int)sizeof(wp::vec_t<3, wp::float32>)));
    if (wp_linear_contiguous)
        lift_3770de84_cpu_backward_tasks<true>(dim, _wp_args, _wp_adj_args);
    else
        lift_3770de84_cpu_backward_tasks<false>(dim, _wp_args, _wp_adj_args);
}

extern "C" {

WP_API void lift_3770de84_cpu_backward(
    wp::launch_bounds_t<1> *dim,
    wp_args_lift_3770de84 *_wp_args,
    wp_args_lift_3770de84 *_wp_adj_args)
{
    lift_3770de84_cpu_backward_dispatch(dim, _wp_args, _wp_adj_args);
}

} // extern C

struct wp_args_closest_4089b8f1 {
    wp::uint64 mesh;
    wp::array_t<wp::vec_t<3, wp::float32>> queries;
    wp::array_t<wp::float32> out;
};


template <bool wp_linear_contiguous>
static void closest_4089b8f1_cpu_kernel_forward(
    wp::launch_bounds_t<1> dim,
    size_t task_index,
    wp_args_closest_4089b8f1 *_wp_args)
{
    static constexpr bool wp_linear_tid = wp_linear_contiguous;
    wp_args_closest_4089b8f1 wp_contiguous_args;
    if constexpr (wp_linear_contiguous)
    {
        wp_contiguous_args = *_wp_args;
        wp_contiguous_args.queries.strides[0] = sizeof(wp::vec_t<3, wp::float32>);
        wp_contiguous_args.out.strides[0] = sizeof(wp::float32);
        _wp_args = &wp_contiguous_args;
    }
    //---------
    // argument vars
    wp::uint64 var_mesh = _wp_args->mesh;
    wp::array_t<wp::vec_t<3, wp::float32>> var_queries = _wp_args->queries;
    wp::array_t<wp::float32> var_out = _wp_args->out;
    //---------
    // primal vars
    wp::int32 var_0;
    wp::vec_t<3, wp::float32>* var_1;
    const wp::float32 var_2 = 100.0;
    wp::mesh_query_point_t var_3;
    wp::vec_t<3, wp::float32> var_4;
    bool* var_5;
    bool var_6;
    wp::int32* var_7;
    wp::float32* var_8;
    wp::float32* var_9;
    wp::vec_t<3, wp::float32> var_10;
    wp::int32 var_11;
    wp::float32 var_12;
    wp::float32 var_13;
    wp::vec_t<3, wp::float32>* var_14;
    wp::vec_t<3, wp::float32> var_15;
    wp::vec_t<3, wp::float32> var_16;
    wp::float32 var_17;
    bool var_18;
    //---------
    // forward
    // def closest(mesh: wp.uint64, queries: wp.array(dtype=wp.vec3), out: wp.array(dtype=float)):       <L 17>
    // i = wp.tid()                                                                           <L 18>
    var_0 = builtin_tid1d();
    // q = wp.mesh_query_point_no_sign(mesh, queries[i], 100.0)                               <L 19>
    var_1 = wp::address(var_queries, var_0);
    var_4 = wp::load(var_1);
    var_3 = wp::mesh_query_point_no_sign(var_mesh, var_4, var_2);
    // if q.result:                                                                           <L 20>
    var_5 = &((var_3).result);
    var_6 = wp::load(var_5);
    if (var_6) {
        // out[i] = wp.length(wp.mesh_eval_position(mesh, q.face, q.u, q.v) - queries[i])       <L 21>
        var_7 = &((var_3).face);
        var_8 = &((var_3).u);
        var_9 = &((var_3).v);
        var_11 = wp::load(var_7);
        var_12 = wp::load(var_8);
        var_13 = wp::load(var_9);
        var_10 = wp::mesh_eval_position(var_mesh, var_11, var_12, var_13);
        var_14 = wp::address(var_queries, var_0);
        var_16 = wp::load(var_14);
        var_15 = wp::sub(var_10, var_16);
        var_17 = wp::length(var_15);
        wp::array_store(var_out, var_0, var_17);
    }
    var_18 = wp::load(var_5);
}



template <bool wp_linear_contiguous>
static void closest_4089b8f1_cpu_kernel_backward(
    wp::launch_bounds_t<1> dim,
    size_t task_index,
    wp_args_closest_4089b8f1 *_wp_args,
    wp_args_closest_4089b8f1 *_wp_adj_args)
{
    static constexpr bool wp_linear_tid = wp_linear_contiguous;
    wp_args_closest_4089b8f1 wp_contiguous_args;
    wp_args_closest_4089b8f1 wp_contiguous_adj_args;
    if constexpr (wp_linear_contiguous)
    {
        wp_contiguous_args = *_wp_args;
        wp_contiguous_adj_args = *_wp_adj_args;
        wp_contiguous_args.queries.strides[0] = sizeof(wp::vec_t<3, wp::float32>);
        wp_contiguous_adj_args.queries.strides[0] = sizeof(wp::vec_t<3, wp::float32>);
        wp_contiguous_args.out.strides[0] = sizeof(wp::float32);
        wp_contiguous_adj_args.out.strides[0] = sizeof(wp::float32);
        _wp_args = &wp_contiguous_args;
        _wp_adj_args = &wp_contiguous_adj_args;
    }
    //---------
    // argument vars
    wp::uint64 var_mesh = _wp_args->mesh;
    wp::array_t<wp::vec_t<3, wp::float32>> var_queries = _wp_args->queries;
    wp::array_t<wp::float32> var_out = _wp_args->out;
    wp::uint64 adj_mesh = _wp_adj_args->mesh;
    wp::array_t<wp::vec_t<3, wp::float32>> adj_queries = _wp_adj_args->queries;
    wp::array_t<wp::float32> adj_out = _wp_adj_args->out;
    //---------
    // primal vars
    wp::int32 var_0;
    wp::vec_t<3, wp::float32>* var_1;
    const wp::float32 var_2 = 100.0;
    wp::mesh_query_point_t var_3;
    wp::vec_t<3, wp::float32> var_4;
    bool* var_5;
    bool var_6;
    wp::int32* var_7;
    wp::float32* var_8;
    wp::float32* var_9;
    wp::vec_t<3, wp::float32> var_10;
    wp::int32 var_11;
    wp::float32 var_12;
    wp::float32 var_13;
    wp::vec_t<3, wp::float32>* var_14;
    wp::vec_t<3, wp::float32> var_15;
    wp::vec_t<3, wp::float32> var_16;
    wp::float32 var_17;
    bool var_18;
    //---------
    // dual vars
    wp::int32 adj_0 = {};
    wp::vec_t<3, wp::float32> adj_1 = {};
    wp::float32 adj_2 = {};
    wp::mesh_query_point_t adj_3 = {};
    wp::vec_t<3, wp::float32> adj_4 = {};
    bool adj_5 = {};
    bool adj_6 = {};
    wp::int32 adj_7 = {};
    wp::float32 adj_8 = {};
    wp::float32 adj_9 = {};
    wp::vec_t<3, wp::float32> adj_10 = {};
    wp::int32 adj_11 = {};
    wp::float32 adj_12 = {};
    wp::float32 adj_13 = {};
    wp::vec_t<3, wp::float32> adj_14 = {};
    wp::vec_t<3, wp::float32> adj_15 = {};
    wp::vec_t<3, wp::float32> adj_16 = {};
    wp::float32 adj_17 = {};
    bool adj_18 = {};
    //---------
    // forward
    // def closest(mesh: wp.uint64, queries: wp.array(dtype=wp.vec3), out: wp.array(dtype=float)):       <L 17>
    // i = wp.tid()                                                                           <L 18>
    var_0 = builtin_tid1d();
    // q = wp.mesh_query_point_no_sign(mesh, queries[i], 100.0)                               <L 19>
    var_1 = wp::address(var_queries, var_0);
    var_4 = wp::load(var_1);
    var_3 = wp::mesh_query_point_no_sign(var_mesh, var_4, var_2);
    // if q.result:                                                                           <L 20>
    var_5 = &((var_3).result);
    var_6 = wp::load(var_5);
    if (var_6) {
        // out[i] = wp.length(wp.mesh_eval_position(mesh, q.face, q.u, q.v) - queries[i])       <L 21>
        var_7 = &((var_3).face);
        var_8 = &((var_3).u);
        var_9 = &((var_3).v);
        var_11 = wp::load(var_7);
        var_12 = wp::load(var_8);
        var_13 = wp::load(var_9);
        var_10 = wp::mesh_eval_position(var_mesh, var_11, var_12, var_13);
        var_14 = wp::address(var_queries, var_0);
        var_16 = wp::load(var_14);
        var_15 = wp::sub(var_10, var_16);
        var_17 = wp::length(var_15);
        // wp::array_store(var_out, var_0, var_17);
    }
    var_18 = wp::load(var_5);
    //---------
    // reverse
    if (var_18) {
        wp::adj_array_store(var_out, var_0, var_17, adj_out, adj_0, adj_17);
        wp::adj_length(var_15, var_17, adj_15, adj_17);
        wp::adj_sub(var_10, var_16, adj_10, adj_14, adj_15);
        wp::adj_address(var_queries, var_0, adj_queries, adj_0, adj_14);
        wp::adj_mesh_eval_position(var_mesh, var_11, var_12, var_13, adj_mesh, adj_7, adj_8, adj_9, adj_10);
        adj_3.v += adj_9;
        adj_3.u += adj_8;
        adj_3.face = adj_7;
        // adj: out[i] = wp.length(wp.mesh_eval_position(mesh, q.face, q.u, q.v) - queries[i])  <L 21>
    }
    adj_3.result = adj_5;
    // adj: if q.result:                                                                      <L 20>
    wp::adj_mesh_query_point_no_sign(var_mesh, var_4, var_2, var_3, adj_mesh, adj_1, adj_2, adj_3);
    wp::adj_address(var_queries, var_0, adj_queries, adj_0, adj_1);
    // adj: q = wp.mesh_query_point_no_sign(mesh, queries[i], 100.0)                          <L 19>
    // adj: i = wp.tid()                                                                      <L 18>
    // adj: def closest(mesh: wp.uint64, queries: wp.array(dtype=wp.vec3), out: wp.array(dtype=float)):  <L 17>
    return;
}



template <bool wp_linear_contiguous>
static WP_FORCEINLINE void closest_4089b8f1_cpu_forward_tasks(
    wp::launch_bounds_t<1> *dim,
    wp_args_closest_4089b8f1 *_wp_args)
{
    for (size_t task_index = 0; task_index < dim->size; ++task_index)
    {
        closest_4089b8f1_cpu_kernel_forward<wp_linear_contiguous>(*dim, task_index, _wp_args);
    }
}

static WP_FORCEINLINE void closest_4089b8f1_cpu_forward_dispatch(
    wp::launch_bounds_t<1> *dim,
    wp_args_closest_4089b8f1 *_wp_args)
{
    wp::tile_shared_storage_t tile_mem;
#if defined(WP_ENABLE_TILES_IN_STACK_MEMORY)
    wp::shared_tile_storage = &tile_mem;
#endif

    const bool wp_linear_contiguous = dim->coord_mult == 1 && ((_wp_args->queries.strides[0] == (int)sizeof(wp::vec_t<3, wp::float32>)) & (_wp_args->out.strides[0] == (int)sizeof(wp::float32)));
    if (wp_linear_contiguous)
        closest_4089b8f1_cpu_forward_tasks<true>(dim, _wp_args);
    else
        closest_4089b8f1_cpu_forward_tasks<false>(dim, _wp_args);
}

extern "C" {

// Python CPU entry points
WP_API void closest_4089b8f1_cpu_forward(
    wp::launch_bounds_t<1> *dim,
    wp_args_closest_4089b8f1 *_wp_args)
{
    closest_4089b8f1_cpu_forward_dispatch(dim, _wp_args);
}

} // extern C



template <bool wp_linear_contiguous>
static WP_FORCEINLINE void closest_4089b8f1_cpu_backward_tasks(
    wp::launch_bounds_t<1> *dim,
    wp_args_closest_4089b8f1 *_wp_args,
    wp_args_closest_4089b8f1 *_wp_adj_args)
{
    for (size_t task_index = 0; task_index < dim->size; ++task_index)
    {
        closest_4089b8f1_cpu_kernel_backward<wp_linear_contiguous>(
            *dim, task_index, _wp_args, _wp_adj_args);
    }
}

static WP_FORCEINLINE void closest_4089b8f1_cpu_backward_dispatch(
    wp::launch_bounds_t<1> *dim,
    wp_args_closest_4089b8f1 *_wp_args,
    wp_args_closest_4089b8f1 *_wp_adj_args)
{
    wp::tile_shared_storage_t tile_mem;
#if defined(WP_ENABLE_TILES_IN_STACK_MEMORY)
    wp::shared_tile_storage = &tile_mem;
#endif

    const bool wp_linear_contiguous = dim->coord_mult == 1 && ((_wp_args->queries.strides[0] == (int)sizeof(wp::vec_t<3, wp::float32>)) & (_wp_adj_args->queries.strides[0] == (int)sizeof(wp::vec_t<3, wp::float32>)) & (_wp_args->out.strides[0] == (int)sizeof(wp::float32)) & (_wp_adj_args->out.strides[0] == (int)sizeof(wp::float32)));
    if (wp_linear_contiguous)
        closest_4089b8f1_cpu_backward_tasks<true>(dim, _wp_args, _wp_adj_args);
    else
        closest_4089b8f1_cpu_backward_tasks<false>(dim, _wp_args, _wp_adj_args);
}

extern "C" {

WP_API void closest_4089b8f1_cpu_backward(
    wp::launch_bounds_t<1> *dim,
    wp_args_closest_4089b8f1 *_wp_args,
    wp_args_closest_4089b8f1 *_wp_adj_args)
{
    closest_4089b8f1_cpu_backward_dispatch(dim, _wp_args, _wp_adj_args);
}

} // extern C

