
#define WP_TILE_BLOCK_DIM 1
#define WP_NO_CRT
#include "builtin.h"

// avoid namespacing of float type for casting to float type, this is to avoid wp::float(x), which is not valid in C++
#define float(x) cast_float(x)
#define adj_float(x, adj_x, adj_ret) adj_cast_float(x, adj_x, adj_ret)

#define int(x) cast_int(x)
#define adj_int(x, adj_x, adj_ret) adj_cast_int(x, adj_x, adj_ret)

#define builtin_tid1d() wp::tid(task_index, dim)
#define builtin_tid2d(x, y) wp::tid(x, y, task_index, dim)
#define builtin_tid3d(x, y, z) wp::tid(x, y, z, task_index, dim)
#define builtin_tid4d(x, y, z, w) wp::tid(x, y, z, w, task_index, dim)

#define builtin_block_dim() wp::block_dim()

struct wp_args_reload_21b9eaf2 {
    wp::array_t<wp::int32> counter;
    wp::array_t<wp::int32> steps;
};


void reload_21b9eaf2_cpu_kernel_forward(
    wp::launch_bounds_t dim,
    size_t task_index,
    wp_args_reload_21b9eaf2 *_wp_args)
{
    //---------
    // argument vars
    wp::array_t<wp::int32> var_counter = _wp_args->counter;
    wp::array_t<wp::int32> var_steps = _wp_args->steps;
    //---------
    // primal vars
    const wp::int32 var_0 = 0;
    wp::int32* var_1;
    const wp::int32 var_2 = 0;
    wp::int32 var_3;
    //---------
    // forward
    // def reload(counter: wp.array(dtype=wp.int32), steps: wp.array(dtype=wp.int32)):        <L 63>
    // counter[0] = steps[0]                                                                  <L 64>
    var_1 = wp::address(var_steps, var_0);
    var_3 = wp::load(var_1);
    wp::array_store(var_counter, var_2, var_3);
}



void reload_21b9eaf2_cpu_kernel_backward(
    wp::launch_bounds_t dim,
    size_t task_index,
    wp_args_reload_21b9eaf2 *_wp_args,
    wp_args_reload_21b9eaf2 *_wp_adj_args)
{
    //---------
    // argument vars
    wp::array_t<wp::int32> var_counter = _wp_args->counter;
    wp::array_t<wp::int32> var_steps = _wp_args->steps;
    wp::array_t<wp::int32> adj_counter = _wp_adj_args->counter;
    wp::array_t<wp::int32> adj_steps = _wp_adj_args->steps;
    //---------
    // primal vars
    const wp::int32 var_0 = 0;
    wp::int32* var_1;
    const wp::int32 var_2 = 0;
    wp::int32 var_3;
    //---------
    // dual vars
    wp::int32 adj_0 = {};
    wp::int32 adj_1 = {};
    wp::int32 adj_2 = {};
    wp::int32 adj_3 = {};
    //---------
    // forward
    // def reload(counter: wp.array(dtype=wp.int32), steps: wp.array(dtype=wp.int32)):        <L 63>
    // counter[0] = steps[0]                                                                  <L 64>
    var_1 = wp::address(var_steps, var_0);
    var_3 = wp::load(var_1);
    // wp::array_store(var_counter, var_2, var_3);
    //---------
    // reverse
    wp::adj_array_store(var_counter, var_2, var_3, adj_counter, adj_2, adj_1);
    wp::adj_address(var_steps, var_0, adj_steps, adj_0, adj_1);
    // adj: counter[0] = steps[0]                                                             <L 64>
    // adj: def reload(counter: wp.array(dtype=wp.int32), steps: wp.array(dtype=wp.int32)):   <L 63>
    return;
}



extern "C" {

// Python CPU entry points
WP_API void reload_21b9eaf2_cpu_forward(
    wp::launch_bounds_t dim,
    wp_args_reload_21b9eaf2 *_wp_args)
{
    wp::tile_shared_storage_t tile_mem;
#if defined(WP_ENABLE_TILES_IN_STACK_MEMORY)
    wp::shared_tile_storage = &tile_mem;
#endif

    for (size_t task_index = 0; task_index < dim.size; ++task_index)
    {
        reload_21b9eaf2_cpu_kernel_forward(dim, task_index, _wp_args);
    }
}

} // extern C



extern "C" {

WP_API void reload_21b9eaf2_cpu_backward(
    wp::launch_bounds_t dim,
    wp_args_reload_21b9eaf2 *_wp_args,
    wp_args_reload_21b9eaf2 *_wp_adj_args)
{
    wp::tile_shared_storage_t tile_mem;
#if defined(WP_ENABLE_TILES_IN_STACK_MEMORY)
    wp::shared_tile_storage = &tile_mem;
#endif

    for (size_t task_index = 0; task_index < dim.size; ++task_index)
    {
        reload_21b9eaf2_cpu_kernel_backward(dim, task_index, _wp_args, _wp_adj_args);
    }
}

} // extern C

struct wp_args_push_61a45b67 {
    wp::array_t<wp::vec_t<3, wp::float32>> v;
    wp::array_t<wp::float32> x;
    wp::vec_t<3, wp::float32> g;
    wp::float32 dt;
};


void push_61a45b67_cpu_kernel_forward(
    wp::launch_bounds_t dim,
    size_t task_index,
    wp_args_push_61a45b67 *_wp_args)
{
    //---------
    // argument vars
    wp::array_t<wp::vec_t<3, wp::float32>> var_v = _wp_args->v;
    wp::array_t<wp::float32> var_x = _wp_args->x;
    wp::vec_t<3, wp::float32> var_g = _wp_args->g;
    wp::float32 var_dt = _wp_args->dt;
    //---------
    // primal vars
    wp::int32 var_0;
    wp::vec_t<3, wp::float32>* var_1;
    wp::vec_t<3, wp::float32> var_2;
    wp::vec_t<3, wp::float32> var_3;
    wp::vec_t<3, wp::float32> var_4;
    wp::float32* var_5;
    wp::vec_t<3, wp::float32>* var_6;
    const wp::int32 var_7 = 1;
    wp::float32 var_8;
    wp::vec_t<3, wp::float32> var_9;
    wp::float32 var_10;
    wp::float32 var_11;
    wp::float32 var_12;
    //---------
    // forward
    // def push(v: wp.array(dtype=wp.vec3), x: wp.array(dtype=float), g: wp.vec3, dt: float):       <L 94>
    // i = wp.tid()                                                                           <L 95>
    var_0 = builtin_tid1d();
    // v[i] = v[i] + g * dt                                                                   <L 96>
    var_1 = wp::address(var_v, var_0);
    var_2 = wp::mul(var_g, var_dt);
    var_4 = wp::load(var_1);
    var_3 = wp::add(var_4, var_2);
    wp::array_store(var_v, var_0, var_3);
    // x[i] = x[i] + v[i][1] * dt                                                             <L 97>
    var_5 = wp::address(var_x, var_0);
    var_6 = wp::address(var_v, var_0);
    var_9 = wp::load(var_6);
    var_8 = wp::extract(var_9, var_7);
    var_10 = wp::mul(var_8, var_dt);
    var_12 = wp::load(var_5);
    var_11 = wp::add(var_12, var_10);
    wp::array_store(var_x, var_0, var_11);
}



void push_61a45b67_cpu_kernel_backward(
    wp::launch_bounds_t dim,
    size_t task_index,
    wp_args_push_61a45b67 *_wp_args,
    wp_args_push_61a45b67 *_wp_adj_args)
{
    //---------
    // argument vars
    wp::array_t<wp::vec_t<3, wp::float32>> var_v = _wp_args->v;
    wp::array_t<wp::float32> var_x = _wp_args->x;
    wp::vec_t<3, wp::float32> var_g = _wp_args->g;
    wp::float32 var_dt = _wp_args->dt;
    wp::array_t<wp::vec_t<3, wp::float32>> adj_v = _wp_adj_args->v;
    wp::array_t<wp::float32> adj_x = _wp_adj_args->x;
    wp::vec_t<3, wp::float32> adj_g = _wp_adj_args->g;
    wp::float32 adj_dt = _wp_adj_args->dt;
    //---------
    // primal vars
    wp::int32 var_0;
    wp::vec_t<3, wp::float32>* var_1;
    wp::vec_t<3, wp::float32> var_2;
    wp::vec_t<3, wp::float32> var_3;
    wp::vec_t<3, wp::float32> var_4;
    wp::float32* var_5;
    wp::vec_t<3, wp::float32>* var_6;
    const wp::int32 var_7 = 1;
    wp::float32 var_8;
    wp::vec_t<3, wp::float32> var_9;
    wp::float32 var_10;
    wp::float32 var_11;
    wp::float32 var_12;
    //---------
    // dual vars
    wp::int32 adj_0 = {};
    wp::vec_t<3, wp::float32> adj_1 = {};
    wp::vec_t<3, wp::float32> adj_2 = {};
    wp::vec_t<3, wp::float32> adj_3 = {};
    wp::vec_t<3, wp::float32> adj_4 = {};
    wp::float32 adj_5 = {};
    wp::vec_t<3, wp::float32> adj_6 = {};
    wp::int32 adj_7 = {};
    wp::float32 adj_8 = {};
    wp::vec_t<3, wp::float32> adj_9 = {};
    wp::float32 adj_10 = {};
    wp::float32 adj_11 = {};
    wp::float32 adj_12 = {};
    //---------
    // forward
    // def push(v: wp.array(dtype=wp.vec3), x: wp.array(dtype=float), g: wp.vec3, dt: float):       <L 94>
    // i = wp.tid()                                                                           <L 95>
    var_0 = builtin_tid1d();
    // v[i] = v[i] + g * dt                                                                   <L 96>
    var_1 = wp::address(var_v, var_0);
    var_2 = wp::mul(var_g, var_dt);
    var_4 = wp::load(var_1);
    var_3 = wp::add(var_4, var_2);
    // wp::array_store(var_v, var_0, var_3);
    // x[i] = x[i] + v[i][1] * dt                                                             <L 97>
    var_5 = wp::address(var_x, var_0);
    var_6 = wp::address(var_v, var_0);
    var_9 = wp::load(var_6);
    var_8 = wp::extract(var_9, var_7);
    var_10 = wp::mul(var_8, var_dt);
    var_12 = wp::load(var_5);
    var_11 = wp::add(var_12, var_10);
    // wp::array_store(var_x, var_0, var_11);
    //---------
    // reverse
    wp::adj_array_store(var_x, var_0, var_11, adj_x, adj_0, adj_11);
    wp::adj_add(var_12, var_10, adj_5, adj_10, adj_11);
    wp::adj_mul(var_8, var_dt, adj_8, adj_dt, adj_10);
    wp::adj_extract(var_9, var_7, adj_6, adj_7, adj_8);
    wp::adj_address(var_v, var_0, adj_v, adj_0, adj_6);
    wp::adj_address(var_x, var_0, adj_x, adj_0, adj_5);
    // adj: x[i] = x[i] + v[i][1] * dt                                                        <L 97>
    wp::adj_array_store(var_v, var_0, var_3, adj_v, adj_0, adj_3);
    wp::adj_add(var_4, var_2, adj_1, adj_2, adj_3);
    wp::adj_mul(var_g, var_dt, adj_g, adj_dt, adj_2);
    wp::adj_address(var_v, var_0, adj_v, adj_0, adj_1);
    // adj: v[i] = v[i] + g * dt                                                              <L 96>
    // adj: i = wp.tid()                                                                      <L 95>
    // adj: def push(v: wp.array(dtype=wp.vec3), x: wp.array(dtype=float), g: wp.vec3, dt: float):  <L 94>
    return;
}



extern "C" {

// Python CPU entry points
WP_API void push_61a45b67_cpu_forward(
    wp::launch_bounds_t dim,
    wp_args_push_61a45b67 *_wp_args)
{
    wp::tile_shared_storage_t tile_mem;
#if defined(WP_ENABLE_TILES_IN_STACK_MEMORY)
    wp::shared_tile_storage = &tile_mem;
#endif

    for (size_t task_index = 0; task_index < dim.size; ++task_index)
    {
        push_61a45b67_cpu_kernel_forward(dim, task_index, _wp_args);
    }
}

} // extern C



extern "C" {

WP_API void push_61a45b67_cpu_backward(
    wp::launch_bounds_t dim,
    wp_args_push_61a45b67 *_wp_args,
    wp_args_push_61a45b67 *_wp_adj_args)
{
    wp::tile_shared_storage_t tile_mem;
#if defined(WP_ENABLE_TILES_IN_STACK_MEMORY)
    wp::shared_tile_storage = &tile_mem;
#endif

    for (size_t task_index = 0; task_index < dim.size; ++task_index)
    {
        push_61a45b67_cpu_kernel_backward(dim, task_index, _wp_args, _wp_adj_args);
    }
}

} // extern C

struct wp_args_scale_eb32458a {
    wp::array_t<wp::float32> x;
    wp::float32 factor;
};


void scale_eb32458a_cpu_kernel_forward(
    wp::launch_bounds_t dim,
    size_t task_index,
    wp_args_scale_eb32458a *_wp_args)
{
    //---------
    // argument vars
    wp::array_t<wp::float32> var_x = _wp_args->x;
    wp::float32 var_factor = _wp_args->factor;
    //---------
    // primal vars
    wp::int32 var_0;
    wp::float32* var_1;
    wp::float32 var_2;
    wp::float32 var_3;
    //---------
    // forward
    // def scale(x: wp.array(dtype=float), factor: float):                                    <L 57>
    // i = wp.tid()                                                                           <L 58>
    var_0 = builtin_tid1d();
    // x[i] = x[i] * factor                                                                   <L 59>
    var_1 = wp::address(var_x, var_0);
    var_3 = wp::load(var_1);
    var_2 = wp::mul(var_3, var_factor);
    wp::array_store(var_x, var_0, var_2);
}



void scale_eb32458a_cpu_kernel_backward(
    wp::launch_bounds_t dim,
    size_t task_index,
    wp_args_scale_eb32458a *_wp_args,
    wp_args_scale_eb32458a *_wp_adj_args)
{
    //---------
    // argument vars
    wp::array_t<wp::float32> var_x = _wp_args->x;
    wp::float32 var_factor = _wp_args->factor;
    wp::array_t<wp::float32> adj_x = _wp_adj_args->x;
    wp::float32 adj_factor = _wp_adj_args->factor;
    //---------
    // primal vars
    wp::int32 var_0;
    wp::float32* var_1;
    wp::float32 var_2;
    wp::float32 var_3;
    //---------
    // dual vars
    wp::int32 adj_0 = {};
    wp::float32 adj_1 = {};
    wp::float32 adj_2 = {};
    wp::float32 adj_3 = {};
    //---------
    // forward
    // def scale(x: wp.array(dtype=float), factor: float):                                    <L 57>
    // i = wp.tid()                                                                           <L 58>
    var_0 = builtin_tid1d();
    // x[i] = x[i] * factor                                                                   <L 59>
    var_1 = wp::address(var_x, var_0);
    var_3 = wp::load(var_1);
    var_2 = wp::mul(var_3, var_factor);
    // wp::array_store(var_x, var_0, var_2);
    //---------
    // reverse
    wp::adj_array_store(var_x, var_0, var_2, adj_x, adj_0, adj_2);
    wp::adj_mul(var_3, var_factor, adj_1, adj_factor, adj_2);
    wp::adj_address(var_x, var_0, adj_x, adj_0, adj_1);
    // adj: x[i] = x[i] * factor                                                              <L 59>
    // adj: i = wp.tid()                                                                      <L 58>
    // adj: def scale(x: wp.array(dtype=float), factor: float):                               <L 57>
    return;
}



extern "C" {

// Python CPU entry points
WP_API void scale_eb32458a_cpu_forward(
    wp::launch_bounds_t dim,
    wp_args_scale_eb32458a *_wp_args)
{
    wp::tile_shared_storage_t tile_mem;
#if defined(WP_ENABLE_TILES_IN_STACK_MEMORY)
    wp::shared_tile_storage = &tile_mem;
#endif

    for (size_t task_index = 0; task_index < dim.size; ++task_index)
    {
        scale_eb32458a_cpu_kernel_forward(dim, task_index, _wp_args);
    }
}

} // extern C



extern "C" {

WP_API void scale_eb32458a_cpu_backward(
    wp::launch_bounds_t dim,
    wp_args_scale_eb32458a *_wp_args,
    wp_args_scale_eb32458a *_wp_adj_args)
{
    wp::tile_shared_storage_t tile_mem;
#if defined(WP_ENABLE_TILES_IN_STACK_MEMORY)
    wp::shared_tile_storage = &tile_mem;
#endif

    for (size_t task_index = 0; task_index < dim.size; ++task_index)
    {
        scale_eb32458a_cpu_kernel_backward(dim, task_index, _wp_args, _wp_adj_args);
    }
}

} // extern C

struct wp_args_add_0dbe1af3 {
    wp::array_t<wp::float32> x;
    wp::float32 amount;
};


void add_0dbe1af3_cpu_kernel_forward(
    wp::launch_bounds_t dim,
    size_t task_index,
    wp_args_add_0dbe1af3 *_wp_args)
{
    //---------
    // argument vars
    wp::array_t<wp::float32> var_x = _wp_args->x;
    wp::float32 var_amount = _wp_args->amount;
    //---------
    // primal vars
    wp::int32 var_0;
    wp::float32* var_1;
    wp::float32 var_2;
    wp::float32 var_3;
    //---------
    // forward
    // def add(x: wp.array(dtype=float), amount: float):                                      <L 51>
    // i = wp.tid()                                                                           <L 52>
    var_0 = builtin_tid1d();
    // x[i] = x[i] + amount                                                                   <L 53>
    var_1 = wp::address(var_x, var_0);
    var_3 = wp::load(var_1);
    var_2 = wp::add(var_3, var_amount);
    wp::array_store(var_x, var_0, var_2);
}



void add_0dbe1af3_cpu_kernel_backward(
    wp::launch_bounds_t dim,
    size_t task_index,
    wp_args_add_0dbe1af3 *_wp_args,
    wp_args_add_0dbe1af3 *_wp_adj_args)
{
    //---------
    // argument vars
    wp::array_t<wp::float32> var_x = _wp_args->x;
    wp::float32 var_amount = _wp_args->amount;
    wp::array_t<wp::float32> adj_x = _wp_adj_args->x;
    wp::float32 adj_amount = _wp_adj_args->amount;
    //---------
    // primal vars
    wp::int32 var_0;
    wp::float32* var_1;
    wp::float32 var_2;
    wp::float32 var_3;
    //---------
    // dual vars
    wp::int32 adj_0 = {};
    wp::float32 adj_1 = {};
    wp::float32 adj_2 = {};
    wp::float32 adj_3 = {};
    //---------
    // forward
    // def add(x: wp.array(dtype=float), amount: float):                                      <L 51>
    // i = wp.tid()                                                                           <L 52>
    var_0 = builtin_tid1d();
    // x[i] = x[i] + amount                                                                   <L 53>
    var_1 = wp::address(var_x, var_0);
    var_3 = wp::load(var_1);
    var_2 = wp::add(var_3, var_amount);
    // wp::array_store(var_x, var_0, var_2);
    //---------
    // reverse
    wp::adj_array_store(var_x, var_0, var_2, adj_x, adj_0, adj_2);
    wp::adj_add(var_3, var_amount, adj_1, adj_amount, adj_2);
    wp::adj_address(var_x, var_0, adj_x, adj_0, adj_1);
    // adj: x[i] = x[i] + amount                                                              <L 53>
    // adj: i = wp.tid()                                                                      <L 52>
    // adj: def add(x: wp.array(dtype=float), amount: float):                                 <L 51>
    return;
}



extern "C" {

// Python CPU entry points
WP_API void add_0dbe1af3_cpu_forward(
    wp::launch_bounds_t dim,
    wp_args_add_0dbe1af3 *_wp_args)
{
    wp::tile_shared_storage_t tile_mem;
#if defined(WP_ENABLE_TILES_IN_STACK_MEMORY)
    wp::shared_tile_storage = &tile_mem;
#endif

    for (size_t task_index = 0; task_index < dim.size; ++task_index)
    {
        add_0dbe1af3_cpu_kernel_forward(dim, task_index, _wp_args);
    }
}

} // extern C



extern "C" {

WP_API void add_0dbe1af3_cpu_backward(
    wp::launch_bounds_t dim,
    wp_args_add_0dbe1af3 *_wp_args,
    wp_args_add_0dbe1af3 *_wp_adj_args)
{
    wp::tile_shared_storage_t tile_mem;
#if defined(WP_ENABLE_TILES_IN_STACK_MEMORY)
    wp::shared_tile_storage = &tile_mem;
#endif

    for (size_t task_index = 0; task_index < dim.size; ++task_index)
    {
        add_0dbe1af3_cpu_kernel_backward(dim, task_index, _wp_args, _wp_adj_args);
    }
}

} // extern C

struct wp_args_decrement_cbf26bfc {
    wp::array_t<wp::int32> counter;
};


void decrement_cbf26bfc_cpu_kernel_forward(
    wp::launch_bounds_t dim,
    size_t task_index,
    wp_args_decrement_cbf26bfc *_wp_args)
{
    //---------
    // argument vars
    wp::array_t<wp::int32> var_counter = _wp_args->counter;
    //---------
    // primal vars
    const wp::int32 var_0 = 0;
    wp::int32* var_1;
    const wp::int32 var_2 = 1;
    wp::int32 var_3;
    wp::int32 var_4;
    const wp::int32 var_5 = 0;
    //---------
    // forward
    // def decrement(counter: wp.array(dtype=wp.int32)):                                      <L 68>
    // counter[0] = counter[0] - 1                                                            <L 69>
    var_1 = wp::address(var_counter, var_0);
    var_4 = wp::load(var_1);
    var_3 = wp::sub(var_4, var_2);
    wp::array_store(var_counter, var_5, var_3);
}



void decrement_cbf26bfc_cpu_kernel_backward(
    wp::launch_bounds_t dim,
    size_t task_index,
    wp_args_decrement_cbf26bfc *_wp_args,
    wp_args_decrement_cbf26bfc *_wp_adj_args)
{
    //---------
    // argument vars
    wp::array_t<wp::int32> var_counter = _wp_args->counter;
    wp::array_t<wp::int32> adj_counter = _wp_adj_args->counter;
    //---------
    // primal vars
    const wp::int32 var_0 = 0;
    wp::int32* var_1;
    const wp::int32 var_2 = 1;
    wp::int32 var_3;
    wp::int32 var_4;
    const wp::int32 var_5 = 0;
    //---------
    // dual vars
    wp::int32 adj_0 = {};
    wp::int32 adj_1 = {};
    wp::int32 adj_2 = {};
    wp::int32 adj_3 = {};
    wp::int32 adj_4 = {};
    wp::int32 adj_5 = {};
    //---------
    // forward
    // def decrement(counter: wp.array(dtype=wp.int32)):                                      <L 68>
    // counter[0] = counter[0] - 1                                                            <L 69>
    var_1 = wp::address(var_counter, var_0);
    var_4 = wp::load(var_1);
    var_3 = wp::sub(var_4, var_2);
    // wp::array_store(var_counter, var_5, var_3);
    //---------
    // reverse
    wp::adj_array_store(var_counter, var_5, var_3, adj_counter, adj_5, adj_3);
    wp::adj_sub(var_4, var_2, adj_1, adj_2, adj_3);
    wp::adj_address(var_counter, var_0, adj_counter, adj_0, adj_1);
    // adj: counter[0] = counter[0] - 1                                                       <L 69>
    // adj: def decrement(counter: wp.array(dtype=wp.int32)):                                 <L 68>
    return;
}



extern "C" {

// Python CPU entry points
WP_API void decrement_cbf26bfc_cpu_forward(
    wp::launch_bounds_t dim,
    wp_args_decrement_cbf26bfc *_wp_args)
{
    wp::tile_shared_storage_t tile_mem;
#if defined(WP_ENABLE_TILES_IN_STACK_MEMORY)
    wp::shared_tile_storage = &tile_mem;
#endif

    for (size_t task_index = 0; task_index < dim.size; ++task_index)
    {
        decrement_cbf26bfc_cpu_kernel_forward(dim, task_index, _wp_args);
    }
}

} // extern C



extern "C" {

WP_API void decrement_cbf26bfc_cpu_backward(
    wp::launch_bounds_t dim,
    wp_args_decrement_cbf26bfc *_wp_args,
    wp_args_decrement_cbf26bfc *_wp_adj_args)
{
    wp::tile_shared_storage_t tile_mem;
#if defined(WP_ENABLE_TILES_IN_STACK_MEMORY)
    wp::shared_tile_storage = &tile_mem;
#endif

    for (size_t task_index = 0; task_index < dim.size; ++task_index)
    {
        decrement_cbf26bfc_cpu_kernel_backward(dim, task_index, _wp_args, _wp_adj_args);
    }
}

} // extern C

